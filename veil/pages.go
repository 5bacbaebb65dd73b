package veil

// The engine that reads the pages of a list concurrently and hands them over in order: List
// reads collections with it, the forwarder the event journal.

import (
	"context"
	"sync"
)

// PlanStep is what a plan has for a reader that is free: a page to read, none yet (a page held
// by the pages or the caller may still change the plan), or none more.
type PlanStep int

const (
	PlanRead PlanStep = iota
	PlanWait
	PlanDone
)

// PageReaderOptions configure ReadPages. A span S names one page (its offset, limit, ...).
type PageReaderOptions[S any] struct {
	// Plan names the next page. It is called by one reader at a time, so the pages are handed
	// over in the order it names them. PlanWait when no page is held ends the reading.
	Plan func() (S, PlanStep)
	// Fetch reads the page of a span. slotted, when called, says that its request holds one of
	// the client's request slots (InTurn); calling it is optional.
	Fetch func(ctx context.Context, span S, slotted func()) ([]byte, error)
	// Readers bounds the requests in flight; each reader sends its next request the moment it
	// has handed over its last answer, so no goroutine has to be woken in between.
	Readers int
	// Window bounds the pages held: planned and not yet passed by the caller (a page is held
	// until the caller asks for the next one).
	Window int
	// InTurn: each request takes its client slot after the request of the page before it.
	// Goroutines started together run in no particular order (the newest often first), and a
	// first page taking its slot last kept every page after it waiting while the slots stood
	// idle.
	InTurn bool
	// Early: a free reader plans its next page at once and waits for room in the window with
	// it, rather than planning once there is room. A plan that reads the caller's progress
	// (the forwarder's slack) then sees it as of one page before.
	Early bool
}

// Fetched is one page as read: its span and the answer, undecoded (the caller decodes it when
// it comes to it: it waits for that page in order anyway, and decoding there rather than in a
// reader leaves the cores to the round trips while answers arrive).
type Fetched[S any] struct {
	Span S
	Body []byte
	Err  error
}

// PageReader reads the pages a plan names, concurrently, and hands them over in the plan's
// order. A reader that fails stops: the caller stops at that page.
type PageReader[S any] struct {
	o      PageReaderOptions[S]
	ctx    context.Context
	cancel context.CancelFunc
	out    chan *pending[S] // in plan order; never full, as it holds at most Window pages
	closed chan struct{}    // out is closed: every reader has returned

	holding bool // the caller has a page, released when it asks for the next (Next only)

	mu    sync.Mutex
	cond  *sync.Cond // readers wait here for room in the window or for the plan to move on
	held  int        // pages planned and not released
	ended bool       // nothing more is planned
	early *pending[S]
	turn  chan struct{} // closed once the last page planned holds its slot
}

// pending is a page planned; done is closed once it is read.
type pending[S any] struct {
	Fetched[S]
	done    chan struct{}
	after   <-chan struct{} // InTurn: the page before holds its slot
	slotted chan struct{}
}

// ReadPages starts reading the pages of o.Plan; the caller takes them with Next and ends the
// reading with Stop.
func ReadPages[S any](ctx context.Context, o PageReaderOptions[S]) *PageReader[S] {
	o.Readers, o.Window = max(o.Readers, 1), max(o.Window, 1)
	ctx, cancel := context.WithCancel(ctx)
	p := &PageReader[S]{o: o, ctx: ctx, cancel: cancel, out: make(chan *pending[S], o.Window), closed: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.turn = make(chan struct{})
	close(p.turn)
	context.AfterFunc(ctx, p.end)
	var readers sync.WaitGroup
	for range o.Readers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			p.read()
		}()
	}
	go func() {
		readers.Wait()
		close(p.out)
		close(p.closed)
	}()
	return p
}

// Next waits for the next page in the plan's order and releases the one before it. ok is false
// once every page planned has been handed over; err is the context's error when it ended first.
func (p *PageReader[S]) Next() (f Fetched[S], ok bool, err error) {
	p.mu.Lock()
	if p.holding {
		p.held--
		p.cond.Signal() // one page more may be planned; the reader that plans it wakes the next
	}
	p.mu.Unlock()
	pg, ok := <-p.out
	p.holding = ok
	if !ok {
		return f, false, nil
	}
	select {
	case <-pg.done: // an answer that is there wins over the context
	default:
		select {
		case <-pg.done:
		case <-p.ctx.Done():
			return f, true, p.ctx.Err()
		}
	}
	return pg.Fetched, true, nil
}

// Stop ends the reading and waits for the readers: requests in flight are called off.
func (p *PageReader[S]) Stop() {
	p.cancel()
	p.end()
	for range p.out { // what was read and not taken
	}
	<-p.closed
}

// end stops the planning and wakes the readers that wait for it.
func (p *PageReader[S]) end() {
	p.mu.Lock()
	p.ended = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// read is one reader: it plans a page, reads it, and goes on until the plan is done, the
// reading stops or a read fails.
func (p *PageReader[S]) read() {
	for {
		pg := p.plan()
		if pg == nil || !p.fetch(pg) {
			return
		}
	}
}

// plan returns the next page, placed in the window and in out, or nil when the reading ended.
func (p *PageReader[S]) plan() *pending[S] {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.ended {
		pg := p.early
		if pg == nil && (p.o.Early || p.held < p.o.Window) {
			span, step := p.o.Plan()
			switch {
			case step == PlanDone, step == PlanWait && p.held == 0:
				p.ended = true
				p.cond.Broadcast()
				return nil
			case step == PlanRead:
				pg = &pending[S]{Fetched: Fetched[S]{Span: span}, done: make(chan struct{})}
				p.early = pg
			}
		}
		if pg != nil && p.held < p.o.Window {
			p.early = nil
			p.held++
			pg.after, pg.slotted = p.turn, make(chan struct{})
			p.turn = pg.slotted
			p.out <- pg
			if p.o.Early || p.held < p.o.Window {
				p.cond.Signal() // a reader waiting may plan the next
			}
			return pg
		}
		p.cond.Wait()
	}
	return nil
}

// fetch reads one page; it reports whether the read succeeded. A page whose turn never came
// (the reading stopped first) is left unread: Next reports the context's error for it.
func (p *PageReader[S]) fetch(pg *pending[S]) bool {
	var once sync.Once
	slotted := func() { once.Do(func() { close(pg.slotted) }) }
	defer slotted()
	if p.o.InTurn {
		select {
		case <-pg.after:
		case <-p.ctx.Done():
			return false
		}
	}
	pg.Body, pg.Err = p.o.Fetch(p.ctx, pg.Span, slotted)
	close(pg.done)
	return pg.Err == nil
}
