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

// list pages through a collection.
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
func list[T any](ctx context.Context, c *Client, path string, q Query) iter.Seq2[T, error] {
	return listSized[T](ctx, c, path, q, nil)
}

// listSized is list that also tells sized the count of the first page, before yielding.
func listSized[T any](ctx context.Context, c *Client, path string, q Query, sized func(count int)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()

		first, err := listPage[T](ctx, c, path, 0, MaxPageSize, q)
		if err != nil {
			yield(zero, err)
			return
		}
		if sized != nil {
			sized(first.Count)
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
		stride, total := len(first.Results), first.Count
		if stride == 0 || total <= stride {
			return
		}

		type fetched struct {
			page Page[T]
			err  error
		}
		var pending []chan fetched // in offset order
		next, ended := stride, false
		for {
			for !ended && len(pending) < c.pageSlots && next < total {
				ch := make(chan fetched, 1)
				wg.Add(1)
				go func(offset int) {
					defer wg.Done()
					p, err := listPage[T](ctx, c, path, offset, MaxPageSize, q)
					ch <- fetched{p, err}
				}(next)
				pending = append(pending, ch)
				next += stride
			}
			if len(pending) == 0 {
				return
			}
			f := <-pending[0]
			pending = pending[1:]
			if f.err != nil {
				yield(zero, f.err)
				return
			}
			total = max(total, f.page.Count)
			if len(f.page.Results) < stride {
				ended = true
			}
			if !emit(f.page.Results) {
				return
			}
		}
	}
}

func listPage[T any](ctx context.Context, c *Client, path string, offset, limit int, q Query) (Page[T], error) {
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
	r := &request{method: http.MethodGet, endpoint: path, path: escapePath(path), query: query, retry: true}
	body, _, err := c.do(ctx, r)
	if err != nil {
		return Page[T]{}, err
	}
	p, err := decodePage[T](body, offset)
	if err != nil {
		return Page[T]{}, fmt.Errorf("veil: decoding %s (offset %d): %w", r, offset, err)
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
	sized := func(n int) { out = make([]T, 0, min(max(n, 0), maxPrealloc)) }
	for v, err := range listSized[T](ctx, c, path, q, sized) {
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
