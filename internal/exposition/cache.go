package exposition

// Cache: one collector's rendered Set, rendered again by Run when the collector says its data
// changed; and Renderer, what every Cache and Handler of one process share.

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
	now     func() time.Time // the clock of demand; nil: time.Now (tests set another)
}

// NewRenderer returns a Renderer for one process.
func NewRenderer() *Renderer { return &Renderer{} }

func (r *Renderer) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// sweep drops, once, the forms of a format nobody asked for within keepForm from the Sets of
// sets (read only then): without it a format's forms would stay until the next render of each
// collector, which may be hours away.
func (r *Renderer) sweep(sets func() []*Set) {
	if drop, any := r.demand.expired(r.clock()); any {
		dropForms(sets(), drop)
	}
}

// Pace bounds how often a Cache renders: at most every Every, and at most 1/Share of the time
// (the pause after a render is at least Share times what it cost). The zero Pace renders
// after every change.
type Pace struct {
	Every time.Duration
	Share int
}

// Cache holds the Set of one collector and renders it again after a change. It owns the
// render state: the Set being replaced and the generation (how many changes were said), so a
// collector only says that its state changed (Invalidate) and how to emit it (emit, under the
// Cache's lock, one render at a time, the previous Set held by the Builder).
//
// NewCache renders once; after that only Run renders, paced: a change said while Run is busy
// or pausing is in the next render, and Invalidate never renders itself, so a caller may hold
// locks that emit takes.
type Cache struct {
	r     *Renderer
	emit  func(Sink)
	pace  Pace
	after func()
	mu    sync.Mutex // b
	b     Builder
	set   atomic.Pointer[Set]
	stale chan struct{}
	now   chan struct{} // a change that ends the pause (Now)
	gen   atomic.Uint64 // changes said so far
	done  atomic.Uint64 // the generation of the last render's start
}

// NewCache returns a Cache with its first render done. after, if not nil, runs after each
// render has replaced the Set.
func NewCache(r *Renderer, pace Pace, emit func(Sink), after func()) *Cache {
	c := &Cache{r: r, emit: emit, pace: pace, after: after, stale: make(chan struct{}, 1), now: make(chan struct{}, 1)}
	if r != nil {
		c.b.gate = &r.scrapes
	}
	c.render()
	return c
}

// Set is the Set of the last render.
func (c *Cache) Set() *Set { return c.set.Load() }

// Invalidate says the collector's state changed: Run renders it.
func (c *Cache) Invalidate() {
	c.gen.Add(1)
	select {
	case c.stale <- struct{}{}:
	default: // one is pending: it will read the newest state
	}
}

// Now says a change that should not wait for the pause after the last render (a first full
// sweep, which a freshly started exporter has nothing to show before): Run renders it as soon
// as the render under way, if any, ends. The pacing resumes after that render.
func (c *Cache) Now() {
	c.Invalidate()
	select {
	case c.now <- struct{}{}:
	default:
	}
}

// render replaces the Set with the series of the collector's state now, and says what it
// cost: its time, less the pauses it made for scrapes.
func (c *Cache) render() (cost time.Duration) {
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done.Store(c.gen.Load())
	waited := c.b.waited
	c.b.since(c.set.Load())
	c.emit(c.b.Sink())
	set := c.b.Finish()
	if c.r != nil {
		set.prepare(c.r.demand.wanted(c.r.clock()), &c.b)
	}
	c.set.Store(set)
	if c.after != nil {
		c.after()
	}
	return time.Since(start) - (c.b.waited - waited)
}

// Run renders after each change until ctx is done, paced by the Cache's Pace: a change that
// lands during the pause is in the next render.
func (c *Cache) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.stale:
		}
		if c.done.Load() == c.gen.Load() {
			continue // rendered already by a render that started after the change
		}
		select {
		case <-c.now: // said before this render starts: it is in it
		default:
		}
		cost := c.render()
		if c.pace == (Pace{}) {
			continue
		}
		t.Reset(max(c.pace.Every, time.Duration(c.pace.Share)*cost))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.now:
			t.Stop()
		}
	}
}
