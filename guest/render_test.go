package guest

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// TestGuestRenderedIsCollected: the guest series a render writes are what client_golang writes
// for the same checker state collected live, and the render loop follows the checks.
func TestGuestRenderedIsCollected(t *testing.T) {
	cfg := guestTestConfig()
	cfg.StatsInterval = 200 * time.Millisecond
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(40), cfg: cfg})
	e.waitSweeps(3, 10*time.Second)
	g := e.gc
	var b exposition.Builder
	w := g.view(g.snapshot())
	g.descs.emit(b.Sink(), w)
	set := b.Finish()
	live := liveText(t, func(ch chan<- prometheus.Metric) { g.descs.emit(exposition.Live(ch), w) })
	sameText(t, "guest", renderedText(t, set), live,
		"veil_guest_ping_success{", "veil_guest_os_info{", "veil_guest_filesystem_used_bytes{", "veil_guest_network_receive_bytes_total{", "veil_guest_clock_offset_seconds{",
		"veil_guest_disk_io_time_seconds_total{", "veil_guest_cpu_seconds_total{", "veil_guest_load15{")

	// The render loop: a stopped VM's series leave Rendered after the inventory says so.
	id := e.eligibleIDs()[0]
	e.eventually("the VM's series rendered", 10*time.Second, func() bool {
		return bytes.Contains(renderedText(t, g.Rendered()), []byte(`veil_guest_ping_success{controller="sim",domain_id="`+id+`"}`))
	})
	must(t, e.sim.PowerOff(id))
	e.refresh()
	e.eventually("the stopped VM's series gone from Rendered", 10*time.Second, func() bool {
		return !bytes.Contains(renderedText(t, g.Rendered()), []byte(`domain_id="`+id+`"`))
	})
}

// sent is a collector of metrics collected before.
type sent []prometheus.Metric

func (sent) Describe(chan<- *prometheus.Desc) {}
func (s sent) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s {
		ch <- m
	}
}

// liveText is what client_golang's text encoder writes for what collect sends.
func liveText(t *testing.T, collect func(chan<- prometheus.Metric)) []byte {
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

// renderedText is what the /metrics handler writes of s, uncompressed, in the text format.
func renderedText(t *testing.T, s *exposition.Set) []byte {
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

func sameText(t *testing.T, what string, got, want []byte, mustHave ...string) {
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
