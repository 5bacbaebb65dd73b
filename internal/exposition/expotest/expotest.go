// Package expotest compares what a collector renders with what client_golang writes for the
// same series collected live, for the tests of the packages that render (as httptest serves
// net/http's).
package expotest

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// sent is a collector of metrics collected before.
type sent []prometheus.Metric

func (sent) Describe(chan<- *prometheus.Desc) {}
func (s sent) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s {
		ch <- m
	}
}

// LiveText is what client_golang's text encoder writes for what collect sends.
func LiveText(t testing.TB, collect func(chan<- prometheus.Metric)) []byte {
	t.Helper()
	ch := make(chan prometheus.Metric)
	var got sent
	done := make(chan struct{})
	go func() {
		for m := range ch {
			got = append(got, m)
		}
		close(done)
	}()
	collect(ch)
	close(ch)
	<-done
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(got)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// RenderedText is what the /metrics handler writes of s, uncompressed, in the text format.
func RenderedText(t testing.TB, s *exposition.Set) []byte {
	t.Helper()
	h := exposition.Handler(exposition.HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*exposition.Set { return []*exposition.Set{s} }})
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "" {
		t.Fatalf("/metrics: %d %q", rec.Code, rec.Header().Get("Content-Encoding"))
	}
	return rec.Body.Bytes()
}

func SameText(t testing.TB, what string, got, want []byte, mustHave ...string) {
	t.Helper()
	for _, m := range mustHave {
		if !bytes.Contains(want, []byte(m)) {
			t.Fatalf("%s: the live text lacks %q: the comparison proves little", what, m)
		}
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			t.Fatalf("%s: rendered line %d\n got: %s\nwant: %s", what, i+1, gl[i], wl[i])
		}
	}
	t.Fatalf("%s: rendered %d lines, live %d", what, len(gl), len(wl))
}

// SetSize is the length of what the /metrics handler writes of set, plain and gzip-compressed.
func SetSize(b testing.TB, set *exposition.Set) (plain, gz int) {
	h := exposition.Handler(exposition.HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*exposition.Set { return []*exposition.Set{set} }})
	for _, enc := range []string{"", "gzip"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", "text/plain; version=0.0.4")
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Header().Get("Content-Encoding") != enc {
			b.Fatalf("/metrics %q: %d %q", enc, rec.Code, rec.Header().Get("Content-Encoding"))
		}
		if enc == "" {
			plain = rec.Body.Len()
		} else {
			gz = rec.Body.Len()
		}
	}
	return plain, gz
}
