package veil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// MaxPageSize is the largest page the client asks for (spec §8).
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
// Domain, Task, Event) is yielded at most once (the ids seen are remembered for the iteration,
// the objects are not); an object present throughout is yielded unless removals before it
// shifted it onto a page already read. Other types may repeat an object that shifted pages.
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
		var zero T
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()

		type fetched struct {
			body   []byte
			offset int
			err    error
		}
		var pending []chan fetched // in offset order
		// Pages take the client's request slots in offset order, each after the one before
		// it: goroutines started together run in no particular order (the newest often
		// first), and the first page taking its slot last kept every page after it waiting
		// to be emitted while the slots stood idle (at 10,000 VMs, page 0 was sent 110 ms
		// into a 360 ms refresh).
		prev := make(chan struct{})
		close(prev)
		fetch := func(ctx context.Context, offset int) {
			ch := make(chan fetched, 1)
			after, slotted := prev, make(chan struct{})
			prev = slotted
			wg.Add(1)
			go func() {
				defer wg.Done()
				var once sync.Once
				turn := func() { once.Do(func() { close(slotted) }) }
				defer turn()
				select {
				case <-after:
				case <-ctx.Done():
					ch <- fetched{err: fmt.Errorf("veil: GET %s: %w", path, ctx.Err())}
					return
				}
				body, err := pageBody(ctx, c, path, offset, MaxPageSize, q, turn)
				ch <- fetched{body, offset, err}
			}()
			pending = append(pending, ch)
		}
		// Pages are decoded here, in offset order, as they are emitted: decoded by their
		// fetchers, sixteen pages at once, the one due next shared the cores with fifteen that
		// were not, and the request slots stood idle while it waited.
		take := func() (Page[T], error) {
			f := <-pending[0]
			pending = pending[1:]
			if f.err != nil {
				return Page[T]{}, f.err
			}
			return DecodePage[T](path, f.body, f.offset)
		}

		var key string
		var guess pageHint
		if o.remember {
			key = hintKey(path, q)
			guess = c.hints.get(key)
		}
		// Pages guessed from the previous read go in a context of their own, so they can be
		// called off when the server pages differently now.
		gctx, gcancel := context.WithCancel(ctx)
		defer gcancel()
		fetch(ctx, 0)
		if guess.stride > 0 {
			for off := guess.stride; off < guess.count && len(pending) < o.ahead; off += guess.stride {
				fetch(gctx, off)
			}
		}

		first, err := take()
		if err != nil {
			yield(zero, err)
			return
		}
		stride, total := len(first.Results), first.Count
		if o.remember {
			h := pageHint{count: first.Count}
			if first.Count > stride {
				h.stride = stride
			}
			c.hints.set(key, h)
		}
		if o.sized != nil {
			o.sized(first.Count)
		}
		var seen map[string]struct{}
		if _, ok := any(zero).(identified); ok {
			seen = make(map[string]struct{}, min(max(first.Count, 0), 1<<16))
		}
		emit := func(items []T) bool {
			for _, v := range items {
				if seen != nil {
					if id := any(v).(identified).objectID(); id != "" {
						if _, dup := seen[id]; dup {
							continue
						}
						seen[id] = struct{}{}
					}
				}
				if !yield(v, nil) {
					return false
				}
			}
			return true
		}
		if !emit(first.Results) {
			return
		}
		if stride == 0 || total <= stride {
			return // the guessed pages, if any, lie beyond the end
		}
		if len(pending) > 0 && stride != guess.stride {
			gcancel() // at offsets of another stride: start again from the first page's
			pending = nil
		}
		next, ended := stride*(len(pending)+1), false
		for {
			for !ended && len(pending) < o.ahead && next < total {
				fetch(ctx, next)
				next += stride
			}
			if len(pending) == 0 {
				return
			}
			pg, err := take()
			if err != nil {
				yield(zero, err)
				return
			}
			total = max(total, pg.Count)
			if len(pg.Results) < stride {
				ended = true
			}
			if !emit(pg.Results) {
				return
			}
		}
	}
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

// ListPage reads one page of a collection: offset, limit (capped at 100) and query.
func ListPage[T any](ctx context.Context, c *Client, path string, offset, limit int, q Query) (Page[T], error) {
	body, err := PageBody(ctx, c, path, offset, limit, q)
	if err != nil {
		return Page[T]{}, err
	}
	return DecodePage[T](path, body, offset)
}

// PageBody reads one page of a collection like ListPage and returns the answer undecoded, so a
// caller reading pages concurrently can send its next request before decoding this one
// (DecodePage).
func PageBody(ctx context.Context, c *Client, path string, offset, limit int, q Query) ([]byte, error) {
	return pageBody(ctx, c, path, offset, limit, q, nil)
}

// pageBody is PageBody; slotted, if set, is called once the request holds a request slot.
func pageBody(ctx context.Context, c *Client, path string, offset, limit int, q Query, slotted func()) ([]byte, error) {
	if limit <= 0 || limit > MaxPageSize {
		limit = MaxPageSize
	}
	offset = max(offset, 0)
	query := url.Values{}
	for k, v := range q {
		query[k] = v
	}
	query.Set("limit", strconv.Itoa(limit))
	query.Set("offset", strconv.Itoa(offset))
	r := &request{method: http.MethodGet, endpoint: path, path: escapePath(path), query: query, retry: true, slotted: slotted}
	body, _, err := c.do(ctx, r)
	return body, err
}

// DecodePage decodes a page of path read at offset (PageBody's answer).
func DecodePage[T any](path string, body []byte, offset int) (Page[T], error) {
	p, err := decodePage[T](body, offset)
	if err != nil {
		return Page[T]{}, fmt.Errorf("veil: decoding GET %s (offset %d): %w", path, offset, err)
	}
	return p, nil
}

// decodePage reads the DRF envelope strictly (count and results must be there; next and
// previous are ignored) and each result leniently.
//
// A page is decoded in one pass straight into []T. Only when that pass reports an error, even
// one the lenient rules forgive, is the page decoded again result by result: encoding/json
// reports only its first error, so a forgiven mismatch in one result could hide a fatal one in
// another, and the error must name the result that failed.
func decodePage[T any](body []byte, offset int) (Page[T], error) {
	var fast struct {
		Count   *Number `json:"count"`
		Results []T     `json:"results"`
	}
	if json.Unmarshal(body, &fast) == nil && fast.Count != nil && fast.Results != nil {
		normalizeAll(fast.Results)
		return Page[T]{Count: int(*fast.Count), Results: fast.Results}, nil
	}
	return decodePageByResult[T](body, offset)
}

// decodePageByResult decodes each result on its own, with the lenient rules and an error that
// names the failing result.
func decodePageByResult[T any](body []byte, offset int) (Page[T], error) {
	var env struct {
		Count   *Number           `json:"count"`
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Page[T]{}, fmt.Errorf("malformed JSON at byte %d of %d: %w", se.Offset, len(body), err)
		}
		return Page[T]{}, fmt.Errorf("not a page: %w", err)
	}
	if env.Count == nil || env.Results == nil {
		return Page[T]{}, errors.New(`not a page: "count" or "results" missing`)
	}
	p := Page[T]{Count: int(*env.Count), Results: make([]T, len(env.Results))}
	for i, raw := range env.Results {
		if err := decodeValue(raw, &p.Results[i]); err != nil {
			return Page[T]{}, fmt.Errorf("result %d: %w", offset+i, err)
		}
	}
	return p, nil
}

// maxPrealloc bounds the room reserved from a page's count, which comes from the server.
const maxPrealloc = 1 << 17

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
