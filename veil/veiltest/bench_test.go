package veiltest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchPage serves one page through the handler (no network) to measure the simulator's own cost.
func benchPage(b *testing.B, o Options, path string) {
	s := NewUnstarted(o)
	defer s.Close()
	h := s.Handler()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "jwt "+s.Token)
	s.SetLatency(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

func BenchmarkEventsPage(b *testing.B) {
	benchPage(b, Options{VMs: 100, InitialEvents: 100000}, "/api/events/?limit=100&offset=50000")
}

func BenchmarkDomainsPage(b *testing.B) {
	benchPage(b, Options{VMs: 10000, Nodes: 500}, "/api/domains/?limit=100&offset=5000")
}

func BenchmarkBuild10000VMs(b *testing.B) {
	for b.Loop() {
		NewUnstarted(Options{VMs: 10000, Nodes: 500}).Close()
	}
}
