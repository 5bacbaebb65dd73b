package collector

// The guest checker's rendered series: every change (a check's result, a VM leaving or
// refused, the inventory's eligibility, a sweep's end) marks them stale, and one goroutine
// renders them again, at most every renderEvery, so that a scrape never encodes them.

import (
	"context"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// Rendered is the text of the guest series as of the last render.
func (g *GuestChecker) Rendered() *exposition.Set { return g.rendered.Load() }

// changed marks the rendered series stale.
func (g *GuestChecker) changed() {
	select {
	case g.stale <- struct{}{}:
	default:
	}
}

// render replaces Rendered with the series of the checker's state now, and says what it cost:
// its time, less the pauses it made for scrapes (Builder.Waited).
func (g *GuestChecker) render() (cost time.Duration) {
	start := time.Now()
	w := g.view(g.snapshot())
	g.renderMu.Lock()
	defer g.renderMu.Unlock()
	waited := g.builder.Waited()
	prev := g.rendered.Load()
	g.descs.emit(emitter{b: &g.builder, prev: prev}, w)
	g.rendered.Store(g.builder.Finish(prev))
	return time.Since(start) - (g.builder.Waited() - waited)
}

// renderLoop renders after each change, at most every renderEvery and at most 1/renderShare
// of the time: a result that lands during the pause is in the next render.
func (g *GuestChecker) renderLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.stale:
		}
		t.Reset(max(g.renderEvery, renderShare*g.render()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renderShare bounds rendering to about a twentieth of a core: the pause after a render is at
// least twenty times as long as the render took (a sweep of 10,000 guests every second would
// otherwise render every 100 ms and spend its core on it).
const renderShare = 20

// guestRenderEvery is the pause between renders: a tenth of the ping interval, between 100 ms
// and 2 s. Results are at most that much older on /metrics than in the checker; a render of
// 10,000 checked guests, every family compressed, costs about 0.1 s of CPU
// (BenchmarkGuestRender); renderShare makes the pause longer where renders cost more.
func guestRenderEvery(ping time.Duration) time.Duration {
	return min(max(ping/10, 100*time.Millisecond), 2*time.Second)
}
