package veiltest

// This file holds the paging of collections: limit and offset, the DRF envelope with its next
// and previous links, and the encoding of a page's items once the lock is released.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

type pageReq struct{ limit, offset int }

const maxLimit = 100

func parsePaging(q url.Values) (pageReq, *apiError) {
	p := pageReq{limit: maxLimit}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"limit", &p.limit}, {"offset", &p.offset}} {
		v, ok := q[f.name]
		if !ok || len(v) == 0 || v[0] == "" {
			continue
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 {
			return p, errField(f.name, "invalid", txtf("%s must be a non-negative integer.", "%s должно быть неотрицательным целым числом.", f.name))
		}
		*f.dst = n
	}
	p.limit = min(p.limit, maxLimit)
	return p, nil
}

// window returns the [lo, hi) indexes of the page within count items.
func (p pageReq) window(count int) (int, int) {
	lo := min(p.offset, count)
	return lo, min(lo+p.limit, count)
}

func pageURL(r *http.Request, limit, offset int) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	q := r.URL.Query()
	q.Set("limit", strconv.Itoa(limit))
	if offset > 0 {
		q.Set("offset", strconv.Itoa(offset))
	} else {
		q.Del("offset")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// writePage writes a DRF envelope around pre-encoded items.
func writePage(w http.ResponseWriter, r *http.Request, count int, p pageReq, items [][]byte) {
	size := 96
	for _, it := range items {
		size += len(it) + 1
	}
	var b bytes.Buffer
	b.Grow(size + 2*len(r.URL.Path) + 64)
	b.WriteString(`{"count":`)
	b.WriteString(strconv.Itoa(count))
	b.WriteString(`,"next":`)
	if p.limit > 0 && p.offset+p.limit < count {
		writeJSONString(&b, pageURL(r, p.limit, p.offset+p.limit))
	} else {
		b.WriteString("null")
	}
	b.WriteString(`,"previous":`)
	if p.offset > 0 && p.limit > 0 {
		writeJSONString(&b, pageURL(r, p.limit, max(0, min(p.offset, count)-p.limit)))
	} else {
		b.WriteString("null")
	}
	b.WriteString(`,"results":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	writeJSONBytes(w, http.StatusOK, b.Bytes())
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

// wireAll builds the wire form of xs; call it under s.mu. The values share nothing with the
// state, so they are encoded (encodeAll) after the lock is released: a large page (datapools
// listing hundreds of connected nodes each) must not hold up every other request.
func wireAll[T any](xs []T, f func(T) any) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func encodeAll(vs []any) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i], _ = json.Marshal(v)
	}
	return out
}
