// Tests of where several simulated controllers listen.

package main

import (
	"slices"
	"testing"
)

func TestListenAddrs(t *testing.T) {
	for _, c := range []struct {
		listen string
		n      int
		want   []string
	}{
		{"127.0.0.1:8765", 1, []string{"127.0.0.1:8765"}},
		{"127.0.0.1:8765", 3, []string{"127.0.0.1:8765", "127.0.0.1:8766", "127.0.0.1:8767"}},
		{"127.0.0.1:0", 2, []string{"127.0.0.1:0", "127.0.0.1:0"}},
		{"[::1]:9000", 2, []string{"[::1]:9000", "[::1]:9001"}},
	} {
		got, err := listenAddrs(c.listen, c.n)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("listenAddrs(%q, %d) = %v, %v; want %v", c.listen, c.n, got, err, c.want)
		}
	}
	for _, c := range []struct {
		listen string
		n      int
	}{{"127.0.0.1:8765", 0}, {"127.0.0.1:65535", 2}, {"127.0.0.1", 1}, {"127.0.0.1:x", 1}} {
		if got, err := listenAddrs(c.listen, c.n); err == nil {
			t.Errorf("listenAddrs(%q, %d) = %v, want an error", c.listen, c.n, got)
		}
	}
}
