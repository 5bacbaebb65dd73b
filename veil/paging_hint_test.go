package veil

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestListAllGuessesPagesFromTheLastRead reads a collection whose size and page clamp change
// between reads: every read must return exactly the collection, whatever the previous read found.
func TestListAllGuessesPagesFromTheLastRead(t *testing.T) {
	var mu sync.Mutex
	n, clamp := 0, 100
	var reqs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		mu.Lock()
		count, lim := n, clamp
		mu.Unlock()
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit = min(limit, lim)
		res := []map[string]any{}
		for i := off; i < min(off+limit, count); i++ {
			res = append(res, map[string]any{"id": fmt.Sprintf("vm-%05d", i)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": count, "results": res})
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Token: "t", MaxConcurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name     string
		n, clamp int
		maxReqs  int64
	}{
		{"first read", 1050, 100, 11},
		{"same again", 1050, 100, 11},
		{"server clamps lower", 1050, 30, 35 + 12},
		{"shrunk to one page", 20, 30, 1 + 2*3 + 1},
		// The last read guessed one page of 30; the pages after the first may be asked before
		// the first answers with the new page size, so a few more than 7 are allowed.
		{"grown again", 700, 100, 7 + 3},
		{"shrunk by pages", 250, 100, 3 + 2*3},
		{"grown by pages", 2000, 100, 20},
		{"emptied", 0, 100, 1 + 2*3},
	} {
		mu.Lock()
		n, clamp = step.n, step.clamp
		mu.Unlock()
		reqs.Store(0)
		got, err := c.Domains(context.Background(), nil)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if len(got) != step.n {
			t.Fatalf("%s: %d domains, want %d", step.name, len(got), step.n)
		}
		for i, d := range got {
			if want := fmt.Sprintf("vm-%05d", i); d.ID != want {
				t.Fatalf("%s: domain %d is %s, want %s", step.name, i, d.ID, want)
			}
		}
		if r := reqs.Load(); r > step.maxReqs {
			t.Errorf("%s: %d requests, want at most %d", step.name, r, step.maxReqs)
		}
	}
}

// TestListSendsPagesInOffsetOrder: the pages of a read, guessed from the last one, are sent in
// offset order. Goroutines started together run in no particular order; a first page sent last
// held every page after it in memory, waiting to be emitted, while the request slots stood idle.
// With one slot the order of sending is the order the server sees.
func TestListSendsPagesInOffsetOrder(t *testing.T) {
	var mu sync.Mutex
	var offsets []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		mu.Lock()
		offsets = append(offsets, off)
		mu.Unlock()
		res := []map[string]any{}
		for i := off; i < min(off+100, 1000); i++ {
			res = append(res, map[string]any{"id": fmt.Sprintf("vm-%05d", i)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": 1000, "results": res})
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Token: "t", MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	for read := range 20 {
		mu.Lock()
		offsets = nil
		mu.Unlock()
		if got, err := c.Domains(context.Background(), nil); err != nil || len(got) != 1000 {
			t.Fatalf("read %d: %d domains, %v", read, len(got), err)
		}
		mu.Lock()
		for i := 1; i < len(offsets); i++ {
			if offsets[i] <= offsets[i-1] {
				t.Fatalf("read %d: pages sent at offsets %v, want ascending", read, offsets)
			}
		}
		mu.Unlock()
	}
}
