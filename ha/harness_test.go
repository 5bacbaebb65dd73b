package ha

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// testTTL is short so that expiry paths run in seconds; the renew period is a third of it.
const testTTL = 1500 * time.Millisecond

// world runs coordinators in one process against one NATS (cluster) and keeps the books of
// who holds what: every OnAcquire checks that no other replica holds a lease still valid.
type world struct {
	t      *testing.T
	urls   string
	bucket string
	ctrls  []string
	logs   testutil.SyncBuffer

	mu           sync.Mutex
	replicas     []*replica
	holder       map[string]*holding // controller -> current holder
	unownedSince map[string]time.Time
	maxGap       time.Duration // longest a controller was without a holder (since reset)
	maxUnowned   int           // most controllers without a holder at once (since reset)
	violations   []string
}

type holding struct {
	r *replica
	l *Lease
}

type replica struct {
	name   string
	c      *Coordinator
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	// released counts OnRelease per controller.
	released map[string]int
}

func newWorld(t *testing.T, urls string, ctrls []string) *world {
	w := &world{t: t, urls: urls, bucket: "LEASES_" + fmt.Sprint(time.Now().UnixNano()), ctrls: ctrls,
		holder: map[string]*holding{}, unownedSince: map[string]time.Time{}}
	t.Cleanup(func() {
		for _, r := range w.replicas {
			r.cancel()
			<-r.done
			r.nc.Close()
		}
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", w.logs.String())
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, v := range w.violations {
			t.Error(v)
		}
	})
	return w
}

// start runs a coordinator named name; opt may adjust its options.
// testOptions are a replica's Options and the hooks only tests set.
type testOptions struct {
	Options
	beforeTick func()                                      // runs at the start of every renew period and may block: a paused replica
	wrapKV     func(jetstream.KeyValue) jetstream.KeyValue // the bucket as this replica reaches it
}

func (w *world) start(name string, opt func(*testOptions)) *replica {
	w.t.Helper()
	nc, err := nats.Connect(w.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		w.t.Fatal(err)
	}
	r := &replica{name: name, nc: nc, done: make(chan struct{}), released: map[string]int{}}
	opts := testOptions{Options: Options{
		Bucket: w.bucket, Replicas: 3, LeaseTTL: testTTL, Instance: name, Controllers: w.ctrls,
		Logger:    level.NewFilter(log.With(log.NewLogfmtLogger(&w.logs), "t", log.DefaultTimestampUTC), level.AllowDebug()),
		OnAcquire: func(l *Lease) { w.acquired(r, l) },
		OnRelease: func(ct string) func() { w.releasedBy(r, ct); return nil },
	}}
	if opt != nil {
		opt(&opts)
	}
	r.c, err = New(nc, opts.Options)
	if err != nil {
		w.t.Fatal(err)
	}
	r.c.hooks = testHooks{beforeTick: opts.beforeTick, wrapKV: opts.wrapKV}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.c.Run(ctx) }()
	w.mu.Lock()
	w.replicas = append(w.replicas, r)
	w.mu.Unlock()
	return r
}

func (w *world) acquired(r *replica, l *Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ct := l.Controller()
	if h := w.holder[ct]; h != nil && h.r != r && h.l.Valid() {
		w.violations = append(w.violations, fmt.Sprintf("%s acquired %s while %s still held a valid lease", r.name, ct, h.r.name))
	}
	if !l.Valid() {
		w.violations = append(w.violations, fmt.Sprintf("%s was given an invalid lease of %s", r.name, ct))
	}
	if since, ok := w.unownedSince[ct]; ok {
		w.maxGap = max(w.maxGap, time.Since(since))
		delete(w.unownedSince, ct)
	}
	w.holder[ct] = &holding{r, l}
}

func (w *world) releasedBy(r *replica, ct string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.released[ct]++
	if h := w.holder[ct]; h != nil && h.r == r {
		if h.l.Valid() {
			w.violations = append(w.violations, fmt.Sprintf("%s released %s with its lease still valid", r.name, ct))
		}
		delete(w.holder, ct)
		w.unownedSince[ct] = time.Now()
		w.maxUnowned = max(w.maxUnowned, len(w.unownedSince))
	}
}

// resetGaps starts measuring gaps afresh.
func (w *world) resetGaps() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.maxGap, w.maxUnowned = 0, 0
}

// owners maps each controller to the replica holding a valid lease of it, from the
// coordinators themselves (not the books).
func (w *world) owners(among ...*replica) map[string][]string {
	out := map[string][]string{}
	for _, r := range among {
		for _, ct := range w.ctrls {
			if r.c.Lease(ct) != nil {
				out[ct] = append(out[ct], r.name)
			}
		}
	}
	return out
}

// converged says whether each controller has exactly one holder among live, its desired
// owner given who holds what, and the counts differ by at most one.
func (w *world) converged(live ...*replica) bool {
	own := w.owners(live...)
	held := map[string]string{}
	for _, ct := range w.ctrls {
		if len(own[ct]) != 1 {
			return false
		}
		held[ct] = own[ct][0]
	}
	desired := assign(everyone(replicaNames(live), w.ctrls), held)
	count := map[string]int{}
	for _, ct := range w.ctrls {
		if own[ct][0] != desired[ct] {
			return false
		}
		count[own[ct][0]]++
	}
	lo, hi := len(w.ctrls), 0
	for _, r := range live {
		lo, hi = min(lo, count[r.name]), max(hi, count[r.name])
	}
	return hi-lo <= 1
}

func (w *world) waitConverged(timeout time.Duration, live ...*replica) {
	w.t.Helper()
	testutil.Eventually(w.t, timeout, func() bool { return w.converged(live...) }, "each controller held once, evenly, by %s", replicaNames(live))
}

// held lists the controllers r holds now.
func (w *world) held(r *replica) []string {
	var out []string
	for _, ct := range w.ctrls {
		if r.c.Lease(ct) != nil {
			out = append(out, ct)
		}
	}
	return out
}

// heldBy says whether every controller in cts is held by one of rs.
func (w *world) heldBy(cts []string, rs ...*replica) bool {
	own := w.owners(rs...)
	for _, ct := range cts {
		if len(own[ct]) != 1 {
			return false
		}
	}
	return true
}

func replicaNames(rs []*replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	slices.Sort(out)
	return out
}

// renewals waits until every lease of ls has been renewed n times (its revision moved), calling
// each() between looks; it fails the test if one ends first.
func renewals(t *testing.T, n int, each func(), ls ...*Lease) {
	t.Helper()
	rev, seen := make([]uint64, len(ls)), make([]int, len(ls))
	var grace time.Duration
	for i, l := range ls {
		rev[i], grace = l.lastRev(), max(grace, l.grace)
	}
	testutil.Eventually(t, time.Duration(n+2)*grace, func() bool {
		if each != nil {
			each()
		}
		done := true
		for i, l := range ls {
			if l.Context().Err() != nil {
				t.Fatalf("the lease of %s ended while waiting for its renewals", l.Controller())
			}
			if r := l.lastRev(); r != rev[i] {
				rev[i], seen[i] = r, seen[i]+1
			}
			done = done && seen[i] >= n
		}
		return done
	}, "%d renewals of each of %d leases", n, len(ls))
}

// leasesOf is every lease r holds now.
func leasesOf(r *replica) []*Lease {
	var out []*Lease
	for _, ct := range r.c.table.controllers {
		if l := r.c.Lease(ct); l != nil {
			out = append(out, l)
		}
	}
	return out
}
