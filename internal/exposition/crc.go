package exposition

// crc32Combine: the CRC-32 (IEEE) of two concatenated pieces from the CRC of each and the
// length of the second, as zlib's crc32_combine computes it (polynomial arithmetic mod p(x)),
// so a gzip trailer covers rendered pieces without reading their bytes again.

const crcPoly = 0xedb88320 // reflected IEEE polynomial

// x2n[k] is x^(2^k) mod p(x).
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP returns a(x)·b(x) mod p(x), in the reflected bit order of the CRC.
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
}

// x8nModP returns x^(8n) mod p(x): n zero bytes appended.
func x8nModP(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2n[k&31], p)
		}
	}
	return p
}

// crc32Combine returns the CRC of A+B from crcA, crcB and len(B).
func crc32Combine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA ^ crcB // crcB of nothing is 0
	}
	return multModP(x8nModP(lenB), crcA) ^ crcB
}

// after returns the CRC of text whose CRC is crc followed by the piece's text: crc32Combine
// with the piece's shift made beforehand.
func (p *piece) after(crc uint32) uint32 {
	if p.size <= 0 {
		return crc ^ p.crc
	}
	return multModP(p.shift, crc) ^ p.crc
}
