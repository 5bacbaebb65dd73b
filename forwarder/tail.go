package forwarder

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/veil-exporter/veil-exporter/veil"
)

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
	// for shifts it does not have (a catch-up of a still backlog reads 1% more pages per row).
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

// pageFetcher reads pages concurrently and hands them over strictly in order, holding at most
// prefetchPages pages ahead of the consumer, so memory stays bounded whatever the backlog.
type pageFetcher struct {
	out    chan chan pageResult
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type pageResult struct {
	start, limit, at int
	body             []byte                // the answer, decoded by the consumer (page)
	taken            veil.Page[veil.Event] // or the rows taken from a page already read
	isTaken          bool
	err              error
}

// page decodes the answer (or returns the rows taken).
func (r *pageResult) page() (veil.Page[veil.Event], error) {
	if r.err != nil || r.isTaken {
		return r.taken, r.err
	}
	return decodeEvents(r.body, r.start)
}

// pageSpan is one page to read; at is the offset where the row it must overlap was expected
// (-1: none).
type pageSpan struct{ start, limit, at int }

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

// fetchPages runs concurrency readers, each sending its next request the moment its last answer
// was read: a reader hands the answer over and takes the next span itself, so no goroutine has
// to be woken between one answer and the next request of that slot (on a busy machine such a
// wake costs about half a millisecond per page). The consumer decodes each answer when it comes
// to it: it waits for that page in order anyway, and decoding there rather than in a goroutine
// per page leaves the cores to the round trips while answers arrive.
//
// The first span is not requested when seen covers it: the page locate has just read holds it.
// Reading it again would show the list as it was one round trip later, which proves nothing
// more (every page is read at its own moment anyway) and costs the platform a request in every
// cycle that finds new events.
func fetchPages(ctx context.Context, p eventPager, ordering string, concurrency int, seen *seenPage, spans func(yield func(pageSpan) bool)) *pageFetcher {
	ctx, cancel := context.WithCancel(ctx)
	// Up to concurrency requests are in flight and up to prefetchPages pages wait for the
	// consumer, so reading goes on while a batch is being published.
	f := &pageFetcher{out: make(chan chan pageResult, max(prefetchPages, concurrency)), cancel: cancel}
	next, stopSpans := iter.Pull(spans)
	var mu sync.Mutex // next, seen, and the order of f.out
	take := func() (pageSpan, chan pageResult, bool) {
		mu.Lock()
		defer mu.Unlock()
		for {
			sp, ok := next()
			if !ok {
				return sp, nil, false
			}
			res := make(chan pageResult, 1)
			pg, covered := seen.cover(sp)
			seen = nil // only the first span may be taken from it
			if covered {
				res <- pageResult{start: sp.start, limit: sp.limit, at: sp.at, taken: pg, isTaken: true}
			}
			select {
			case f.out <- res: // blocks while prefetchPages pages are pending
			case <-ctx.Done():
				return sp, nil, false
			}
			if !covered {
				return sp, res, true
			}
		}
	}
	var readers sync.WaitGroup
	for range concurrency {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				sp, res, ok := take()
				if !ok {
					return
				}
				body, err := p.pageBody(ctx, sp.start, sp.limit, ordering)
				res <- pageResult{start: sp.start, limit: sp.limit, at: sp.at, body: body, err: err}
				if err != nil {
					return // the consumer stops at this page
				}
			}
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		readers.Wait()
		stopSpans()
		close(f.out)
	}()
	return f
}

func (f *pageFetcher) stop() {
	f.cancel()
	for range f.out { // unblock the readers
	}
	f.wg.Wait()
}

// probe reads the single event at offset; ok is false past the end of the list.
func (fw *Forwarder) probe(ctx context.Context, off int) (veil.Event, int, bool, error) {
	pg, err := fw.eventsPage(ctx, off, 1)
	if err != nil {
		return veil.Event{}, 0, false, fmt.Errorf("couldn't read events at offset %d: %w", off, err)
	}
	if len(pg.Results) == 0 {
		return veil.Event{}, pg.Count, false, nil
	}
	return pg.Results[0], pg.Count, true, nil
}

// search returns the smallest offset in [lo, hi] where pred holds (pred(hi) is assumed true and
// so is pred past the end of the list).
func (fw *Forwarder) search(ctx context.Context, lo, hi int, pred func(veil.Event) bool) (int, error) {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		e, _, ok, err := fw.probe(ctx, mid)
		if err != nil {
			return 0, err
		}
		if !ok || pred(e) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
