package exposition

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRC32Combine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 8, 100, 4096, 70001} {
		for _, m := range []int{0, 1, 5, 64, 1000, 123457} {
			a, b := make([]byte, n), make([]byte, m)
			for i := range a {
				a[i] = byte(r.UintN(256))
			}
			for i := range b {
				b[i] = byte(r.UintN(256))
			}
			want := crc32.ChecksumIEEE(append(append([]byte{}, a...), b...))
			if got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(m)); got != want {
				t.Fatalf("len %d + %d: combine %08x, want %08x", n, m, got, want)
			}
		}
	}
}
