package veil

// Reading collections: List and the plan of its pages (read by the engine in pages.go), the
// page counts remembered between reads, and single pages (decoded in page_decode.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// MaxPageSize is the largest page the client asks for (the platform caps limit at it).
const MaxPageSize = 100

// List iterates over every object of a collection path (e.g. "/api/domains/") in the list's
// order. It yields a non-nil error at most once, as its last element.
//
// It reads the first page, then the pages after it concurrently (at most MaxConcurrency pages
// fetched ahead of the caller, each held until the caller has taken the ones before it), and
// yields objects in the list's order. The page stride is the length of the first page (a server
// may clamp below 100); the end is the largest count any page reported, so a collection that
// grows while it is read is read on, and a page shorter than the stride, or empty, ends it
// cleanly after the pages already under way.
//
// What is guaranteed while the collection changes underneath: every object yielded was in the
// collection at some instant of the iteration; an object with an id (Node, Cluster, Datapool,
// Domain, Task, Event, Vdisk, VMachineInf) is yielded at most once (the ids seen are remembered
// for the iteration, the objects are not); an object present throughout is yielded unless
// removals before it shifted it onto a page already read. Other types may repeat an object that shifted pages.
func List[T any](ctx context.Context, c *Client, path string, q Query) iter.Seq2[T, error] {
	return listPages[T](ctx, c, path, q, listOptions{ahead: c.pageSlots})
}

// listOptions tune listPages for its caller.
type listOptions struct {
	// ahead bounds the pages requested and not yet taken by the caller. More than the client's
	// slots keeps a request queued for each slot, so a slot freed while the page it carried is
	// decoded is taken again at once.
	ahead int
	// sized is told the count of the first page, before anything is yielded.
	sized func(count int)
	// remember: start the pages the previous read of the same collection found together with
	// the first, instead of waiting one round trip for the count. A caller that reads the
	// whole collection anyway loses nothing when it guessed too many.
	remember bool
}

// listPages is List with options.
func listPages[T any](ctx context.Context, c *Client, path string, q Query, o listOptions) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		l := &listing[T]{c: c, path: path, o: o}
		if o.remember {
			l.key = hintKey(path, q)
			l.guess = c.hints.get(l.key)
		}
		l.read(ctx, q, yield)
	}
}

// listing is one read of a collection by listPages: the plan of its pages, which the pages
// taken move on, and the ids yielded.
type listing[T any] struct {
	c     *Client
	path  string
	o     listOptions
	key   string   // of the collection's hint (o.remember)
	guess pageHint // what the previous read found
	seen  map[string]struct{}
	// yielded counts the objects yielded; limit bounds them once the first page told its
	// count (listLimit). The reader's goroutine only.
	yielded, limit int

	mu      sync.Mutex // the plan: followed by the readers, moved on by the pages taken
	started bool       // the first page is planned
	guessed int        // pages planned from the guess, after the first
	dropped bool       // the guessed pages lie at offsets of another stride: called off
	sized   bool       // the first page was taken: stride and total are known
	stride  int        // the first page's length (a server may clamp below 100)
	total   int        // the largest count a page reported
	next    int        // the offset of the next page to plan
	ended   bool       // a page shorter than the stride was taken
}

// listSpan is one page of a listing; a guessed page was planned from the previous read.
type listSpan struct {
	offset  int
	guessed bool
}

// read yields the collection's objects in order. Pages guessed from the previous read are read
// in a context of their own, so they can be called off when the server pages differently now.
func (l *listing[T]) read(ctx context.Context, q Query, yield func(T, error) bool) {
	var zero T
	ctx, cancel := context.WithCancel(ctx)
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	fetch := func(rctx context.Context, sp listSpan, slotted func()) ([]byte, error) {
		if sp.guessed {
			rctx = gctx
		}
		body, err := pageBody(rctx, l.c, PageRequest{Path: l.path, Offset: sp.offset, Limit: MaxPageSize, Query: q}, slotted)
		if err != nil && sp.guessed && l.isDropped() {
			return nil, nil // its answer is dropped; the reader goes on with the pages that count
		}
		return body, err
	}
	pages := ReadPages(ctx, PageReaderOptions[listSpan]{
		Plan: l.plan, Fetch: fetch, Readers: l.o.ahead, Window: l.o.ahead, InTurn: true,
	})
	defer func() { cancel(); pages.Stop() }()
	for {
		f, ok, err := pages.Next()
		switch {
		case !ok:
			return
		case err != nil:
			yield(zero, fmt.Errorf("veil: GET %s: %w", l.path, err))
			return
		case f.Span.guessed && l.isDropped():
			continue
		case f.Err != nil:
			yield(zero, f.Err)
			return
		}
		pg, err := decodeListPage[T](l.c, l.path, f.Body, f.Span.offset)
		if _, raw := any(zero).(json.RawMessage); !raw {
			releaseBody(f.Body) // decoded values hold copies of its bytes; raw results would not
		}
		if err != nil {
			yield(zero, err)
			return
		}
		more := l.took(pg, gcancel)
		if !l.emit(pg.Results, yield) || !more {
			return
		}
	}
}

// plan names the next page: the first, then those the previous read found after it, then, once
// the first page told the stride, every stride up to the largest count seen, until a page
// ends short.
func (l *listing[T]) plan() (listSpan, PlanStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.started:
		l.started = true
		return listSpan{offset: 0}, PlanRead
	case !l.sized:
		if g := l.guess; g.stride > 0 && (l.guessed+1)*g.stride < g.count {
			l.guessed++
			return listSpan{offset: l.guessed * g.stride, guessed: true}, PlanRead
		}
		return listSpan{}, PlanWait
	case l.stride == 0 || l.ended:
		return listSpan{}, PlanDone
	case l.next >= l.total:
		return listSpan{}, PlanWait // a page not yet taken may report a larger count
	}
	sp := listSpan{offset: l.next}
	l.next += l.stride
	return sp, PlanRead
}

// took moves the plan on with a page taken. The first sets the stride (and calls off the
// guessed pages when they were read at another) and tells o.sized the count. It reports whether
// pages may follow.
func (l *listing[T]) took(pg Page[T], callOff context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sized {
		l.total = min(max(l.total, pg.Count), l.limit+l.stride)
		if len(pg.Results) < l.stride {
			l.ended = true
		}
		return true
	}
	l.sized, l.stride = true, len(pg.Results)
	l.limit = listLimit(pg.Count, l.stride)
	// One page past the limit is read, so that a collection really past it is seen and counted.
	l.total = min(pg.Count, l.limit+l.stride)
	l.next = l.stride * (l.guessed + 1)
	if l.guessed > 0 && l.stride != l.guess.stride {
		l.dropped, l.next = true, l.stride
		callOff()
	}
	if l.o.remember {
		h := pageHint{count: pg.Count}
		if pg.Count > l.stride {
			h.stride = l.stride
		}
		l.c.hints.set(l.key, h)
	}
	if l.o.sized != nil {
		l.o.sized(pg.Count)
	}
	var zero T
	if _, ok := any(zero).(identified); ok {
		l.seen = make(map[string]struct{}, min(max(pg.Count, 0), 1<<16))
	}
	return l.stride > 0 && l.total > l.stride // else the guessed pages, if any, lie beyond the end
}

func (l *listing[T]) isDropped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// emit yields the items not yielded before (by id); it reports whether the caller wants more.
// Past the listing's limit it stops, and tells the objects of the page it did not yield as
// RejectOverLimit.
func (l *listing[T]) emit(items []T, yield func(T, error) bool) bool {
	for i, v := range items {
		if l.limit > 0 && l.yielded >= l.limit {
			l.c.Reject(Rejection{
				Collection: CollectionOf(l.path), Reason: RejectOverLimit, Count: len(items) - i,
				Err: fmt.Errorf("the listing holds more than %d objects (%d times the count it first announced, and a page): it stops there", l.limit, listLimitFactor),
			})
			return false
		}
		if l.seen != nil {
			if id := any(&items[i]).(identified).objectID(); id != "" { // a pointer: no copy
				if _, dup := l.seen[id]; dup {
					continue
				}
				l.seen[id] = struct{}{}
			}
		}
		l.yielded++
		if !yield(v, nil) {
			return false
		}
	}
	return true
}

// listLimitFactor: a listing yields at most this many times the count its first page announced,
// plus a page. A collection may grow while it is read (and is read on), but a count that grows
// without end (a controller in a loop, a hostile proxy) must not make a listing endless.
const listLimitFactor = 4

// listLimit is the most objects a listing yields whose first page announced count with stride
// results.
func listLimit(count, stride int) int {
	return listLimitFactor*max(count, stride, 0) + max(stride, MaxPageSize)
}

// pageHint is what the last read of a collection found: its count, and the page stride the
// server used (0 when it fitted on one page).
type pageHint struct {
	count, stride int
}

// maxHints bounds the collections whose last count a client remembers (a caller may vary the
// query without end).
const maxHints = 64

type pageHints struct {
	mu sync.Mutex
	m  map[string]pageHint
}

func (h *pageHints) get(key string) pageHint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[key]
}

func (h *pageHints) set(key string, v pageHint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]pageHint)
	}
	if _, ok := h.m[key]; ok || len(h.m) < maxHints {
		h.m[key] = v
	}
}

func hintKey(path string, q Query) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// PageRequest is one page of a collection: its path, the offset of its first row, how many rows
// (capped at MaxPageSize; 0 asks for that many) and the query.
type PageRequest struct {
	Path          string
	Offset, Limit int
	Query         Query
}

// ListPage reads one page of a collection.
func ListPage[T any](ctx context.Context, c *Client, r PageRequest) (Page[T], error) {
	body, err := PageBody(ctx, c, r)
	if err != nil {
		return Page[T]{}, err
	}
	return DecodePage[T](r.Path, body, r.Offset)
}

// PageBody reads one page of a collection like ListPage and returns the answer undecoded, so a
// caller reading pages concurrently can send its next request before decoding this one
// (DecodePage).
func PageBody(ctx context.Context, c *Client, r PageRequest) ([]byte, error) {
	return pageBody(ctx, c, r, nil)
}

// pageBody is PageBody; slotted, if set, is called once the request holds a request slot.
func pageBody(ctx context.Context, c *Client, pr PageRequest, slotted func()) ([]byte, error) {
	limit, offset := pr.Limit, max(pr.Offset, 0)
	if limit <= 0 || limit > MaxPageSize {
		limit = MaxPageSize
	}
	query := url.Values{}
	for k, v := range pr.Query {
		query[k] = v
	}
	query.Set("limit", strconv.Itoa(limit))
	query.Set("offset", strconv.Itoa(offset))
	r := &request{method: http.MethodGet, endpoint: pr.Path, path: escapePath(pr.Path), query: query, retry: true, slotted: slotted}
	body, _, err := c.do(ctx, r)
	return body, err
}

// listAll reads a whole collection into a slice sized from the count, so 50,000 VMs are not
// copied again and again as the slice grows.
func listAll[T any](ctx context.Context, c *Client, path string, q Query) ([]T, error) {
	var out []T
	o := listOptions{
		ahead:    2 * c.pageSlots,
		sized:    func(n int) { out = make([]T, 0, min(max(n, 0), maxPrealloc)) },
		remember: true,
	}
	for v, err := range listPages[T](ctx, c, path, q, o) {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// get reads one object; tmpl is the endpoint template with "{id}".
func get[T any](ctx context.Context, c *Client, tmpl, id string) (*T, error) {
	r, err := newRequest(http.MethodGet, tmpl, id)
	if err != nil {
		return nil, err
	}
	body, _, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := decodeValue(body, v); err != nil {
		c.Reject(rejectionOf(CollectionOf(tmpl), capID(id), err))
		return nil, fmt.Errorf("veil: decoding %s: %w", r, err)
	}
	return v, nil
}

// newRequest fills the template's "{id}" with the escaped id. GETs are retryable.
func newRequest(method, tmpl, id string) (*request, error) {
	if strings.Contains(tmpl, "{id}") && id == "" {
		return nil, fmt.Errorf("veil: %s %s: empty id", method, tmpl)
	}
	return &request{
		method:   method,
		endpoint: tmpl,
		path:     strings.Replace(escapePath(tmpl), escapePath("{id}"), url.PathEscape(id), 1),
		retry:    method == http.MethodGet,
	}, nil
}

// escapePath escapes each segment of a path written by the caller.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
