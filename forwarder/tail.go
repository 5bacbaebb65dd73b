package forwarder

// Reading the journal: the journal as the forwarder reads it, how far pages overlap (slack), the
// order the list is served in, the plan of a read's pages and how they are read, and the
// single-event probes that locate searches with.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/veil"
)

// journalReader is the reader of the controller's event journal: how a page is asked for, the
// order the list is served in, and where the last cycle left the boundary and the pages' overlap.
// Only Run's goroutine uses it, but for the order, which the status page reads too.
type journalReader struct {
	pager       eventPager
	page        int    // events per page read (events.page_size)
	ordering    string // the ordering parameter asked for
	auto        bool   // events.order auto: the order is learnt from the pages
	concurrency int    // pages a catch-up reads at once
	order       atomic.Int64
	// hint is the offset where the last cycle left the boundary; slack the pages' overlap it
	// ended with.
	hint, slack int
	// controllerClock is the controller's clock as its last answer dated it (zero: not known);
	// settle how long after its created an event may still appear in the list (settleTime).
	controllerClock func() time.Time
	settle          time.Duration
	obs             *observer // what reading finds lost or read twice
	logger          log.Logger
}

// init configures the journal from opts.
func (j *journalReader) init(opts Options, logger log.Logger) error {
	j.pager, j.logger = clientPager{opts.Client}, logger
	j.controllerClock, j.settle = opts.Client.ServedAt, defaultSettle
	j.page = pageSize(opts.Events.PageSize, logger)
	j.concurrency = catchUpPages
	if opts.Concurrency > 0 {
		j.concurrency = opts.Concurrency
	}
	switch opts.Events.Order {
	case "auto":
		j.ordering, j.auto = "created", true
	case "oldest_first":
		j.ordering = "created"
		j.order.Store(int64(oldestFirst))
	case "newest_first":
		j.ordering = "-created"
		j.order.Store(int64(newestFirst))
	default:
		return fmt.Errorf("forwarder: unknown events.order %q", opts.Events.Order)
	}
	return nil
}

// controllerAt is the controller's clock for a cycle that began when its last answer dated it
// before: before, or, when the cycle brought the controller's first answer, that answer's Date
// less a second (the header is truncated to it), no later than the listing it carried; zero
// when no answer had a Date.
func (j *journalReader) controllerAt(before time.Time) time.Time {
	if !before.IsZero() {
		return before
	}
	if c := j.controllerClock(); !c.IsZero() {
		return c.Add(-time.Second)
	}
	return time.Time{}
}

// served is the order the list is served in as known now (unknownOrder in auto mode until a
// page shows it).
func (j *journalReader) served() direction { return direction(j.order.Load()) }

// dir is the order to work with; oldest first (what we ask for) until shown otherwise.
func (j *journalReader) dir() direction {
	if d := j.served(); d != unknownOrder {
		return d
	}
	return oldestFirst
}

// learnOrder settles the order in auto mode from the first page that shows it.
func (j *journalReader) learnOrder(items []veil.Event) {
	if !j.auto {
		return
	}
	d, was := detect(items), j.served()
	if d == unknownOrder || d == was {
		return
	}
	if was != unknownOrder {
		level.Warn(j.logger).Log("msg", "event order changed", "was", was, "now", d)
	} else {
		level.Info(j.logger).Log("msg", "event order detected", "order", d)
	}
	j.order.Store(int64(d))
}

const (
	pageLimit = 100 // the platform's cap, and the page size unless events.page_size says otherwise
	// minPage is the smallest page that proves contiguity and still progresses: one row
	// overlapping the previous page, the least slack, and one new row.
	minPage = minSlack + 2
	// catchUpPages is how many pages are read concurrently during a catch-up unless
	// Options.Concurrency says otherwise; the client's own concurrency and rate limits still apply.
	catchUpPages = 4
	// prefetchPages bounds what is held in memory: at most this many pages.
	prefetchPages = 20
	// Slack bounds, in rows: what a page overlaps beyond the one row that proves contiguity.
	// It costs that share of every page read, so it stays small while the list holds still and
	// never goes past half a page, which leaves room for progress. The least is one row: a
	// shift seen widens it at once (observe), so a still list pays only that row, not a margin
	// for shifts it does not have (each row of slack is a row more read per page).
	minSlack   = 1
	startSlack = 10
)

// slack is how far pages reach past the row they must overlap, on the side the list moves. It
// follows the shifts observed: at once up to twice the largest, slowly back down, doubled when a
// shift went past it. The consumer of pages observes, the planner of spans (another goroutine)
// loads.
type slack struct {
	n   atomic.Int32
	max int // half a page
}

// newSlack starts at n (0: the default) for pages of page rows (at least minPage).
func newSlack(n, page int) *slack {
	s := &slack{max: max(page/2, minSlack)}
	if n <= 0 {
		n = startSlack
	}
	s.n.Store(int32(min(max(n, minSlack), s.max)))
	return s
}

func (s *slack) load() int { return int(s.n.Load()) }

// observe takes the shift (rows) between where a row was expected and where it was found.
func (s *slack) observe(shift int) {
	need, cur := min(2*shift+minSlack, s.max), s.load()
	if need < cur {
		need = max(need, cur*7/8)
	}
	s.n.Store(int32(need))
}

// widen follows a shift larger than the slack.
func (s *slack) widen() { s.n.Store(int32(min(2*s.load(), s.max))) }

// errResync says the journal moved under the reader (offsets shifted); locate again.
var errResync = errors.New("journal shifted while reading; resynchronising")

// direction of the list as served: oldest first (+1) or newest first (-1); 0 unknown.
type direction int

const (
	unknownOrder direction = 0
	oldestFirst  direction = 1
	newestFirst  direction = -1
)

func (d direction) String() string {
	switch d {
	case oldestFirst:
		return "oldest_first"
	case newestFirst:
		return "newest_first"
	}
	return "unknown"
}

// detect tells the order from the created values of one page.
func detect(items []veil.Event) direction {
	for i := 1; i < len(items); i++ {
		switch items[i].Created.Compare(items[i-1].Created.Time) {
		case 1:
			return oldestFirst
		case -1:
			return newestFirst
		}
	}
	return unknownOrder
}

// pageSpan is one page to read; at is the offset where the row it must overlap was expected
// (-1: none). taken, when set, is what the page locate read moments before holds of it: no
// request is sent (seenPage.cover).
type pageSpan struct {
	start, limit, at int
	taken            *veil.Page[veil.Event]
}

// seenPage is a page read at offset start moments before (by locate).
type seenPage struct {
	start int
	page  veil.Page[veil.Event]
}

// cover returns what a read of sp would have returned when the page was read, if the page holds
// all of it: the rows of sp, or those up to the end of the list when the page reached it.
func (s *seenPage) cover(sp pageSpan) (veil.Page[veil.Event], bool) {
	if s == nil || sp.start < s.start {
		return veil.Page[veil.Event]{}, false
	}
	from, n := sp.start-s.start, len(s.page.Results)
	to := from + sp.limit
	if to > n && s.start+n < s.page.Count { // beyond the page, and the list went on past it
		return veil.Page[veil.Event]{}, false
	}
	to = min(to, n)
	if from > to {
		return veil.Page[veil.Event]{}, false
	}
	return veil.Page[veil.Event]{Count: s.page.Count, Results: s.page.Results[from:to:to]}, true
}

// spanPlan plans the pages of one read of the new events. Each span names the offset where the
// row it must overlap (the anchor, or the previous page's newest row) was when the plan was made;
// the slack in force when a span is planned decides how far the page reaches past it.
//
// The first span is not requested when seen covers it: the page locate has just read holds it.
// Reading it again would show the list as it was one round trip later, which proves nothing
// more (every page is read at its own moment anyway) and costs the platform a request in every
// cycle that finds new events.
type spanPlan struct {
	d           direction
	page, count int
	sl          *slack
	seen        *seenPage // nil once the first span is planned
	started     bool
	at          int // oldest first: of the last span planned; newest first: of the next
	start, end  int // of the last span planned (end: newest first, before the slack)
}

// newSpanPlan plans the read from the boundary bd; when the published event next to it is not
// there (not anchored) the read starts at the very start of the list: newest first, the first
// page must reach the oldest event.
func newSpanPlan(d direction, page int, bd boundary, sl *slack) *spanPlan {
	p := &spanPlan{d: d, page: page, count: bd.count, sl: sl, seen: bd.seen, at: -1, end: bd.count}
	switch {
	case bd.anchored && d == oldestFirst:
		p.at = bd.b - 1
	case bd.anchored:
		p.at, p.end = bd.b, bd.b+1
	}
	return p
}

// plan is the reader's Plan: the next span, or none after the last.
func (p *spanPlan) plan() (pageSpan, veil.PlanStep) {
	next := p.nextNewest
	if p.d == oldestFirst {
		next = p.nextOldest
	}
	sp, ok := next()
	if !ok {
		return sp, veil.PlanDone
	}
	if pg, covered := p.seen.cover(sp); covered {
		sp.taken = &pg
	}
	p.seen = nil // only the first span may be taken from it
	return sp, veil.PlanRead
}

// nextOldest: oldest first, pages go up from the anchor until one reaches the end of the list.
func (p *spanPlan) nextOldest() (pageSpan, bool) {
	switch {
	case !p.started:
		p.started = true
		if p.at >= 0 {
			p.start = max(0, p.at-p.sl.load())
		}
	case p.start+p.page >= p.count:
		return pageSpan{}, false
	default:
		p.at = p.start + p.page - 1
		p.start = p.at - p.sl.load()
	}
	return pageSpan{start: p.start, limit: p.page, at: p.at}, true
}

// nextNewest: newest first, pages go down from the anchor until one reaches offset 0.
func (p *spanPlan) nextNewest() (pageSpan, bool) {
	if p.started {
		if p.start == 0 {
			return pageSpan{}, false
		}
		p.at, p.end = p.start, p.start+1
	}
	p.started = true
	p.end += p.sl.load()
	p.start = max(0, p.end-p.page)
	return pageSpan{start: p.start, limit: p.end - p.start, at: p.at}, true
}

// readSpans reads the pages of plan through veil's page reader: concurrency readers, each
// sending its next request the moment its last answer was read (on a busy machine waking a
// goroutine in between costs about half a millisecond per page). Up to concurrency requests are
// in flight and up to prefetchPages pages wait for the consumer, besides the one it holds, so
// reading goes on while a batch is being published and memory stays bounded whatever the
// backlog. A reader plans its next span as soon as it is free (Early), as it always has.
func (j *journalReader) readSpans(ctx context.Context, plan *spanPlan) *veil.PageReader[pageSpan] {
	p, ordering, concurrency := j.pager, j.ordering, j.concurrency
	return veil.ReadPages(ctx, veil.PageReaderOptions[pageSpan]{
		Plan: plan.plan,
		Fetch: func(ctx context.Context, sp pageSpan, _ func()) ([]byte, error) {
			if sp.taken != nil {
				return nil, nil
			}
			return p.pageBody(ctx, sp.start, sp.limit, ordering)
		},
		Readers: concurrency,
		Window:  max(prefetchPages, concurrency) + 1,
		Early:   true,
	})
}

// rowsBeyond is how many rows the list holds past a page of n rows at offset start, in the
// direction a read goes (towards newer events): oldest first up to count, newest first down to 0.
func rowsBeyond(d direction, start, n, count int) int {
	if d == oldestFirst {
		return count - start - n
	}
	return start
}

// spanPage decodes a page read (or returns the rows taken).
func spanPage(f veil.Fetched[pageSpan]) (veil.Page[veil.Event], error) {
	switch {
	case f.Err != nil:
		return veil.Page[veil.Event]{}, f.Err
	case f.Span.taken != nil:
		return *f.Span.taken, nil
	}
	return decodeEvents(f.Body, f.Span.start)
}

// probe reads the single event at offset: nil past the end of the list; count is the list's
// length then.
func (j *journalReader) probe(ctx context.Context, off int) (e *veil.Event, count int, err error) {
	pg, err := j.eventsPage(ctx, off, 1)
	if err != nil {
		return nil, 0, fmt.Errorf("couldn't read events at offset %d: %w", off, err)
	}
	if len(pg.Results) == 0 {
		return nil, pg.Count, nil
	}
	return &pg.Results[0], pg.Count, nil
}

// search returns the smallest offset in [lo, hi] where pred holds (pred(hi) is assumed true and
// so is pred past the end of the list).
func (j *journalReader) search(ctx context.Context, lo, hi int, pred func(veil.Event) bool) (int, error) {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		e, _, err := j.probe(ctx, mid)
		if err != nil {
			return 0, err
		}
		if e == nil || pred(*e) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
