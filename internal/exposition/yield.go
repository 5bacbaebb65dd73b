package exposition

// Scrapes before renders: a render is background work and a scrape is someone waiting, so a
// render pauses at its yield points while a /metrics scrape of this process is being served.

import (
	"runtime"
	"sync"
	"time"
)

// maxYield bounds one pause of a render: scrapes that follow one another without a gap delay
// a render by at most this much per yield point, never stop it.
const maxYield = 50 * time.Millisecond

// gate counts scrapes in flight and lets a render wait until there are none.
type gate struct {
	mu     sync.Mutex
	n      int
	idle   chan struct{} // closed when n falls back to zero
	paused int64         // yields that waited for a scrape, for tests
}

func (g *gate) enter() {
	g.mu.Lock()
	if g.n++; g.n == 1 {
		g.idle = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	if g.n--; g.n == 0 {
		close(g.idle)
	}
	g.mu.Unlock()
}

// wait returns once no scrape is in flight, or after max, and says how long it waited.
func (g *gate) wait(max time.Duration) time.Duration {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return 0
	}
	idle := g.idle
	g.paused++
	g.mu.Unlock()
	start := time.Now()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	return time.Since(start)
}

// yield is a render's pause point: it lets scrapes in flight finish (up to maxYield), then
// gives up the processor so that a scrape waiting for one runs now, not at the next
// preemption. The time waited is added to the Builder's waited, which the Cache takes out of a
// render's cost.
func (b *Builder) yield() {
	if b.gate != nil {
		b.waited += b.gate.wait(maxYield)
	}
	runtime.Gosched()
}

// yieldBytes is how much text a render compresses or converts between yields: a yield per
// block (about 100 lines) would give up the processor twenty times as often as one per
// yieldEvery series, and on a loaded machine each give-up costs the render its turn.
const yieldBytes = 256 << 10

// yieldAfter counts n bytes of text worked on and yields once yieldBytes are.
func (b *Builder) yieldAfter(n int64) {
	if b.worked += n; b.worked >= yieldBytes {
		b.worked = 0
		b.yield()
	}
}
