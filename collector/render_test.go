package collector

import (
	"bytes"
	"strings"
	"testing"
	"time"

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

func renderedText(t *testing.T, s *exposition.Set) []byte {
	t.Helper()
	b, err := exposition.Families([]*exposition.Set{s})
	if err != nil {
		t.Fatal(err)
	}
	return b
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
		sameText(t, "refresh "+string(rune('1'+i)), renderedText(t, f.inv.Rendered()), liveText(t, f.inv.CollectRendered),
			"veil_domain_info{", "veil_node_info{", "veil_datapool_free_bytes{", "veil_tasks{", `tags="`, "veil_controller_info{")
		// The platform moves on: a VM stops, one is deleted, VMs are added, a node changes.
		ids := f.sim.DomainIDs()
		must(t, f.sim.PowerOff(ids[i]))
		must(t, f.sim.DeleteVM(ids[10+i]))
		f.sim.AddVMs(5)
		must(t, f.sim.SetNodeStatus(f.sim.NodeIDs()[i], "ERROR"))
	}
}

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
	g.descs.emit(emitter{b: &b}, w)
	set := b.Finish(nil)
	live := liveText(t, func(ch chan<- prometheus.Metric) { g.descs.emit(emitter{ch: ch}, w) })
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
