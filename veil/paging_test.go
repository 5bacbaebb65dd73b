package veil_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// pageParams returns limit and offset of a logged request.
func pageParams(t testing.TB, r veiltest.Request) (limit, offset int) {
	t.Helper()
	q, err := url.ParseQuery(r.Query)
	if err != nil {
		t.Fatal(err)
	}
	limit, _ = strconv.Atoi(q.Get("limit"))
	offset, _ = strconv.Atoi(q.Get("offset"))
	return limit, offset
}

func TestListReadsEveryObjectInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vms   int // Options.VMs; -1 means none
		want  int
		pages int
	}{
		{"empty collection", -1, 0, 1},
		{"one object", 1, 1, 1},
		{"exactly one full page", 100, 100, 1},
		{"one over a page", 101, 101, 2},
		{"ten thousand", 10000, 10000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, veiltest.Options{Seed: 9, VMs: tc.vms, Templates: -1})
			c := newClient(t, sim, nil)
			sim.ResetRequests()
			var got []string
			for d, err := range veil.List[veil.Domain](context.Background(), c, "/api/domains/", nil) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, d.ID)
			}
			want := sim.DomainIDs()
			if len(got) != tc.want || len(want) != tc.want {
				t.Fatalf("listed %d, simulator has %d, want %d", len(got), len(want), tc.want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("object %d is %s, want %s: not in the list's order", i, got[i], want[i])
				}
			}
			reqs := requestsTo(sim, "GET", "/api/domains")
			if len(reqs) != tc.pages {
				t.Errorf("%d page requests, want %d", len(reqs), tc.pages)
			}
			offsets := map[int]bool{}
			for _, r := range reqs {
				limit, offset := pageParams(t, r)
				if limit < 1 || limit > veil.MaxPageSize {
					t.Errorf("asked for limit %d", limit)
				}
				if offsets[offset] {
					t.Errorf("offset %d read twice", offset)
				}
				offsets[offset] = true
			}
		})
	}
}

func TestListStopsEarlyWithoutReadingAhead(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 10, VMs: 5000})
	const conc = 3
	c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxConcurrency = conc })
	sim.ResetRequests()
	n := 0
	for _, err := range veil.List[veil.Domain](context.Background(), c, "/api/domains/", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 250 {
			break
		}
	}
	// Pages 1-3 were consumed; at most conc pages may have been fetched beyond them.
	if got := len(requestsTo(sim, "GET", "/api/domains")); got > 3+conc {
		t.Fatalf("%d page requests after consuming 3 pages, want at most %d", got, 3+conc)
	}
}

func TestListCopesWithChangingCollection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(sim *veiltest.Server, orig []string) (added []string)
	}{
		{"grows while read", func(sim *veiltest.Server, _ []string) []string {
			var added []string
			for range 10 {
				added = append(added, sim.AddVMs(30)...)
				time.Sleep(2 * time.Millisecond)
			}
			return added
		}},
		{"shrinks while read", func(sim *veiltest.Server, orig []string) []string {
			for i := 0; i < 600; i += 2 {
				if err := sim.DeleteVM(orig[i]); err != nil {
					panic(err)
				}
				if i%60 == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			return nil
		}},
		{"loses its tail while read", func(sim *veiltest.Server, orig []string) []string {
			for _, id := range orig[len(orig)-700:] {
				if err := sim.DeleteVM(id); err != nil {
					panic(err)
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, veiltest.Options{Seed: 11, VMs: 1500, Templates: -1})
			// Slow pages so the change interleaves with the reading.
			sim.SetFaults(veiltest.Fault{Path: "/api/domains/", Kind: "latency", Latency: 3 * time.Millisecond})
			c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxConcurrency = 2 })
			orig := sim.DomainIDs()
			var (
				wg    sync.WaitGroup
				added []string
				once  sync.Once
			)
			seen := map[string]bool{}
			for d, err := range veil.List[veil.Domain](context.Background(), c, "/api/domains/", nil) {
				if err != nil {
					t.Fatal(err)
				}
				once.Do(func() {
					wg.Add(1)
					go func() { defer wg.Done(); added = tc.change(sim, orig) }()
				})
				if seen[d.ID] {
					t.Errorf("%s yielded twice", d.ID)
				}
				seen[d.ID] = true
			}
			wg.Wait()
			checkListed(t, orig, added, seen)
		})
	}
}

// checkListed: a listing of a changing collection yields only objects that existed, misses none
// when it only grew, and at least half.
func checkListed(t *testing.T, orig, added []string, seen map[string]bool) {
	t.Helper()
	known := map[string]bool{}
	for _, id := range append(append([]string{}, orig...), added...) {
		known[id] = true
	}
	for id := range seen {
		if !known[id] {
			t.Errorf("yielded %s, which never existed", id)
		}
	}
	if added != nil {
		// Growth only shifts objects to later pages: nothing that was there is missed.
		for _, id := range orig {
			if !seen[id] {
				t.Errorf("original %s missed while the collection grew", id)
			}
		}
	}
	if len(seen) < len(orig)/2 {
		t.Errorf("only %d of %d objects yielded", len(seen), len(orig))
	}
}

func TestLimits(t *testing.T) {
	t.Run("requests in flight never exceed MaxConcurrency", func(t *testing.T) {
		sim := newSim(t, veiltest.Options{Seed: 12, VMs: 1500})
		sim.SetLatency(10*time.Millisecond, 0)
		c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxConcurrency = 3 })
		sim.ResetRequests()
		var wg sync.WaitGroup
		for range 3 { // several callers share the client's limit
			wg.Go(func() {
				if _, err := c.Domains(context.Background(), nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := sim.InFlightMax(); got > 3 || got < 2 {
			t.Fatalf("InFlightMax = %d, want 2..3 (bounded, and used)", got)
		}
	})
	t.Run("requests per second never exceed MaxRequestsPerSecond", func(t *testing.T) {
		sim := newSim(t, veiltest.Options{Seed: 13, VMs: 2000})
		const rps = 50.0
		c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxRequestsPerSecond = rps })
		sim.ResetRequests()
		if _, err := c.Domains(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		reqs := sim.Requests()
		if len(reqs) != 20 {
			t.Fatalf("%d requests, want 20", len(reqs))
		}
		span := reqs[len(reqs)-1].Start.Sub(reqs[0].Start)
		// Burst 1: n requests need at least n-1 intervals (10% slack for arrival jitter).
		if min := time.Duration(float64(len(reqs)-1) / rps * 0.9 * float64(time.Second)); span < min {
			t.Fatalf("%d requests within %v, the rate allows no less than %v", len(reqs), span, min)
		}
	})
	t.Run("waiting for the rate limiter respects the context", func(t *testing.T) {
		sim := newSim(t, veiltest.Options{Seed: 14})
		c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxRequestsPerSecond = 0.2 })
		if _, err := c.Clusters(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		sim.ResetRequests()
		if _, err := c.Clusters(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second request within the rate's interval: %v, want deadline exceeded", err)
		}
		if n := len(sim.Requests()); n != 0 {
			t.Fatalf("%d requests sent while the limiter said wait", n)
		}
	})
	t.Run("per-request timeout", func(t *testing.T) {
		sim := newSim(t, veiltest.Options{Seed: 15})
		sim.SetFaults(veiltest.Fault{Path: "/api/clusters/", Kind: "latency", Latency: time.Second})
		c := newClient(t, sim, func(cfg *veil.Config) { cfg.Timeout = 30 * time.Millisecond; cfg.MaxRetries = 1 })
		sim.ResetRequests()
		_, err := c.Clusters(context.Background())
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("err = %v, want a timeout", err)
		}
	})
}
