package collector

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

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

// TestInventoryRenderedIsCollected: the series rendered at a refresh are byte for byte what
// client_golang writes for the same snapshot collected live (names with spaces and quotes,
// tags, empty labels, backups, tasks), before the first refresh and after each.
func TestInventoryRenderedIsCollected(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 3, VMs: 300, Nodes: 7, Datapools: 4, Clusters: 2, InitialTasks: 200}, testCollect(), veil.Config{})
	sameText(t, "before the first refresh", renderedText(t, f.inv.Rendered()), liveText(t, f.inv.CollectRendered), "veil_up")
	for i := range 3 {
		f.mustRefresh(t)
		sameText(t, "refresh "+string(rune('1'+i)), renderedText(t, f.rendered(t)), liveText(t, f.inv.CollectRendered),
			"veil_domain_info{", "veil_node_info{", "veil_datapool_free_bytes{", "veil_tasks{", `tags="`, "veil_controller_info{")
		// The platform moves on: a VM stops, one is deleted, VMs are added, a node changes.
		ids := f.sim.DomainIDs()
		mustDo(t, f.sim.PowerOff(ids[i]))
		mustDo(t, f.sim.DeleteVM(ids[10+i]))
		f.sim.AddVMs(5)
		mustDo(t, f.sim.SetNodeStatus(f.sim.NodeIDs()[i], "ERROR"))
	}
}
