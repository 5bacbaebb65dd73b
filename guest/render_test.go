package guest

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"
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
	w := g.view(g.domains.latest())
	g.descs.emit(b.Sink(), w)
	set := b.Finish()
	live := expotest.LiveText(t, func(ch chan<- prometheus.Metric) { g.descs.emit(exposition.Live(ch), w) })
	expotest.SameText(t, "guest", expotest.RenderedText(t, set), live,
		"veil_guest_ping_success{", "veil_guest_os_info{", "veil_guest_filesystem_used_bytes{", "veil_guest_network_receive_bytes_total{", "veil_guest_clock_offset_seconds{",
		"veil_guest_disk_io_time_seconds_total{", "veil_guest_cpu_seconds_total{", "veil_guest_load15{")

	// The render loop: a stopped VM's series leave Rendered after the inventory says so.
	id := e.eligibleIDs()[0]
	e.eventually("the VM's series rendered", 15*time.Second, func() bool {
		return bytes.Contains(expotest.RenderedText(t, g.Rendered()), []byte(`veil_guest_ping_success{controller="sim",domain_id="`+id+`"}`))
	})
	must(t, e.sim.PowerOff(id))
	e.refresh()
	// Renders are paced at twenty times their own cost (renderShare), which under the race
	// detector on a loaded machine is seconds: the wait allows several.
	e.eventually("the stopped VM's series gone from Rendered", 15*time.Second, func() bool {
		return !bytes.Contains(expotest.RenderedText(t, g.Rendered()), []byte(`domain_id="`+id+`"`))
	})
}
