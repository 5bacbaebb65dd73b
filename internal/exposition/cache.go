package exposition

// Cache: one collector's rendered Set, rendered again when the collector says its data
// changed, by the collector's own goroutine (Run) or at once when none runs; and Renderer,
// what every Cache and Handler of one process share.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Renderer is shared by the Caches and the Handler of one process: the gate that pauses
// renders while a scrape is served, and which formats scrapers have asked for lately. A nil
// Renderer pauses nothing and prepares no format ahead of a scrape.
type Renderer struct {
	scrapes gate
	demand  demand
}

// NewRenderer returns a Renderer for one process.
func NewRenderer() *Renderer { return &Renderer{} }

// Pace bounds how often a Cache renders: at most every Every, and at most 1/Share of the time
// (the pause after a render is at least Share times what it cost). The zero Pace renders
// after every change.
type Pace struct {
	Every time.Duration
	Share int
}

// Cache holds the Set of one collector. Emit adds every series of the collector's state now
// to b (prev is the Set being replaced, for Builder.Flush); it runs under the Cache's lock,
// one render at a time.
type Cache struct {
	r       *Renderer
	emit    func(b *Builder, prev *Set)
	pace    Pace
	after   func()
	mu      sync.Mutex // b
	b       Builder
	set     atomic.Pointer[Set]
	stale   chan struct{}
	running atomic.Bool // Run takes the renders
}

// NewCache returns a Cache with its first render done. after, if not nil, runs after each
// render has replaced the Set.
func NewCache(r *Renderer, pace Pace, emit func(b *Builder, prev *Set), after func()) *Cache {
	c := &Cache{r: r, emit: emit, pace: pace, after: after, stale: make(chan struct{}, 1)}
	if r != nil {
		c.b.gate = &r.scrapes
	}
	c.Render()
	return c
}

// Set is the Set of the last render.
func (c *Cache) Set() *Set { return c.set.Load() }

// Changed says the collector's state changed: Run renders it (paced), or, while Run is not
// running, Changed renders it now.
func (c *Cache) Changed() {
	if !c.running.Load() {
		c.Render()
		return
	}
	c.Stale()
}

// Stale says the collector's state changed, for Run to render; it never renders itself, so a
// caller may hold locks that emit takes.
func (c *Cache) Stale() {
	select {
	case c.stale <- struct{}{}:
	default: // one is pending: it will read the newest state
	}
}

// Render replaces the Set with the series of the collector's state now, and says what it
// cost: its time, less the pauses it made for scrapes.
func (c *Cache) Render() (cost time.Duration) {
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	waited := c.b.waited
	prev := c.set.Load()
	c.emit(&c.b, prev)
	set := c.b.Finish(prev)
	if c.r != nil {
		set.prepare(c.r.demand.wanted(time.Now()), &c.b)
	}
	c.set.Store(set)
	if c.after != nil {
		c.after()
	}
	return time.Since(start) - (c.b.waited - waited)
}

// RenderFresh renders as Render does, without the previous Set: every family is compressed
// again (for benchmarks of a render's whole cost).
func (c *Cache) RenderFresh() time.Duration {
	c.mu.Lock()
	c.set.Store(nil)
	c.mu.Unlock()
	return c.Render()
}

// Run renders after each change until ctx is done, paced by the Cache's Pace: a change that
// lands during the pause is in the next render.
func (c *Cache) Run(ctx context.Context) {
	c.running.Store(true)
	defer c.running.Store(false)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.stale:
		}
		cost := c.Render()
		if c.pace == (Pace{}) {
			continue
		}
		t.Reset(max(c.pace.Every, time.Duration(c.pace.Share)*cost))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
