package guest

// The guest checker's rendered series: every change (a check's result, a VM leaving or
// refused, the inventory's eligibility, a sweep's end) marks them stale, and the Cache's
// goroutine renders them again, paced, so that a scrape never encodes them.

import (
	"time"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// Rendered is the text of the guest series as of the last render.
func (g *Checker) Rendered() *exposition.Set { return g.cache.Set() }

// render adds the series of the checker's state now to b (the Cache's emit).
func (g *Checker) render(s exposition.Sink) {
	g.descs.emit(s, g.view(g.domains.latest()))
}

// renderShare bounds rendering to about a twentieth of a core: the pause after a render is at
// least twenty times as long as the render took (a sweep of 10,000 guests every second would
// otherwise render every 100 ms and spend its core on it).
const renderShare = 20

// guestRenderEvery is the pause between renders: a tenth of the ping interval, between 100 ms
// and 2 s. Results are at most that much older on /metrics than in the checker; renderShare
// makes the pause longer where renders cost more (BenchmarkGuestRender measures one).
func guestRenderEvery(ping time.Duration) time.Duration {
	return min(max(ping/10, 100*time.Millisecond), 2*time.Second)
}
