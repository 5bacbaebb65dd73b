package forwarder

import (
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestNoEventLostNorDuplicated runs the forwarder against a journal that changes while it is
// read and proves, from what a JetStream subscriber receives, every event exactly once in order.
// The backlog is 5,000 events (20,000 with FORWARDER_LONG=1).
func TestNoEventLostNorDuplicated(t *testing.T) {
	backlog := scale(5000, 20000)
	tests := []struct {
		name  string
		order string // sim's default order
		cfg   string // events.order
		run   func(t *testing.T, r *rig) []string
	}{
		{"newest first: 500 events/s at the head while a backlog is read", "newest_first", "newest_first", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(backlog, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			more := feed(r.sim, 5, 10*time.Millisecond, 2*time.Second, veiltest.EventSpec{})()
			return append(want, more...)
		}},
		{"auto order against a newest-first default, with arrivals", "newest_first", "auto", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(backlog/5, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, feed(r.sim, 5, 10*time.Millisecond, time.Second, veiltest.EventSpec{})()...)
		}},
		{"events sharing one created instant across page boundaries, newest first", "newest_first", "newest_first", sharedCreated},
		{"events sharing one created instant across page boundaries, oldest first", "oldest_first", "oldest_first", sharedCreated},
		{"killed and restarted 10 times at random moments", "newest_first", "auto", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(backlog/2, veiltest.EventSpec{})
			wait := feed(r.sim, 3, 10*time.Millisecond, 3*time.Second, veiltest.EventSpec{})
			rng := rand.New(rand.NewPCG(1, 2))
			for range 10 {
				_, stop := r.run()
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				stop()
			}
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, wait()...)
		}},
		{"NATS stopped and restarted while events keep arriving", "oldest_first", "auto", natsStoppedWhileArriving},
		{"API answering 500/503/418 or truncated JSON for 20% of requests", "newest_first", "auto", func(t *testing.T, r *rig) []string {
			r.sim.SetFaults(
				veiltest.Fault{Path: "/api/events/*", Rate: 0.15, Kind: "status", Status: 503},
				veiltest.Fault{Path: "/api/events/*", Rate: 0.05, Kind: "truncated"},
			)
			want := r.sim.AddEvents(backlog/5, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, feed(r.sim, 5, 10*time.Millisecond, 2*time.Second, veiltest.EventSpec{})()...)
		}},
		{"oldest first with retention deleting from the head during the run", "oldest_first", "oldest_first", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(400, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, feed(r.sim, 5, 10*time.Millisecond, 2*time.Second, veiltest.EventSpec{})()...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := veiltest.Options{EventsOrder: tt.order, InitialTasks: -1}
			if tt.name == "oldest first with retention deleting from the head during the run" {
				opts.EventsRetention = 1000
			}
			r := newRig(t, opts, tt.cfg, "earliest")
			rec := subscribe(t, r.nats.URL())
			want := tt.run(t, r)
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 30*time.Second))
		})
	}
}

// sharedCreated adds bursts of events with one created instant that straddle page boundaries.
func sharedCreated(t *testing.T, r *rig) []string {
	var want []string
	want = append(want, r.sim.AddEvents(150, veiltest.EventSpec{})...)
	want = append(want, r.sim.AddEvents(250, veiltest.EventSpec{SameCreated: true})...)
	fw, stop := r.run()
	t.Cleanup(stop)
	// Each burst lands while the forwarder is publishing the ones before it.
	for range 5 {
		published := fw.Status().Published
		testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published > published }, "publishing under way")
		want = append(want, r.sim.AddEvents(130, veiltest.EventSpec{SameCreated: true})...)
	}
	return want
}

func natsOutage() time.Duration {
	if scale(0, 1) == 1 {
		return 30 * time.Second
	}
	return 3 * time.Second
}

// TestGapPastRetentionCountedExactly keeps NATS away while retention deletes events the forwarder
// has seen but could not publish: exactly those are counted as lost, nothing else is, also when
// deletions go on after the loss was first counted.
func TestGapPastRetentionCountedExactly(t *testing.T) {
	tests := []struct {
		name  string
		waves []int // events added while NATS is away, after the 100 seen
	}{
		{"one wave of deletions", []int{140}},
		{"deletions go on after the first count", []int{120, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", EventsRetention: 200, InitialTasks: -1}, "auto", "earliest")
			rec := subscribe(t, r.nats.URL())
			first := r.sim.AddEvents(50, veiltest.EventSpec{})
			fw, stop := r.run()
			t.Cleanup(stop)
			rec.waitFor(t, 50, 10*time.Second)
			r.nats.Stop()
			testutil.Eventually(t, 10*time.Second, func() bool { return !r.conn.Connected() }, "NATS seen gone")
			seen := r.sim.AddEvents(100, veiltest.EventSpec{}) // read (and counted) but not publishable
			testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Backlog == 100 }, "the 100 events seen")
			// 140 more in all: the journal keeps the newest 200, so the 50 published and the oldest
			// 40 of `seen` are deleted; the newest of `seen` survives, which makes the count exact.
			var after []string
			for _, n := range tt.waves {
				after = append(after, r.sim.AddEvents(n, veiltest.EventSpec{})...)
				lost := uint64(max(0, len(after)-100))
				testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Gaps == lost }, "%d events counted lost", lost)
			}
			r.nats.Start()
			want := append(append(append([]string{}, first...), seen[40:]...), after...)
			got := rec.waitFor(t, len(want), 20*time.Second)
			exactlyOnceInOrder(t, "prod", want, got)
			if g := fw.Status().Gaps; g != 40 {
				t.Fatalf("gaps counted %d, want exactly 40", g)
			}
		})
	}
}

// TestStartLatestPublishesNothingOld proves events.start: latest skips the existing journal.
func TestStartLatestPublishesNothingOld(t *testing.T) {
	for _, order := range []string{"newest_first", "oldest_first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: order, InitialTasks: -1}, "auto", "latest")
			rec := subscribe(t, r.nats.URL())
			r.sim.AddEvents(300, veiltest.EventSpec{})
			fw, stop := r.run()
			t.Cleanup(stop)
			testutil.Eventually(t, 10*time.Second, func() bool { return !fw.Status().Position.IsZero() }, "a position after the newest event")
			want := r.sim.AddEvents(20, veiltest.EventSpec{})
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 10*time.Second))
		})
	}
}

// TestPageSizeIsHonoured reads with events.page_size 7: every page asked of the platform holds
// at most 7 events, and every event still arrives exactly once in order, with arrivals during
// the read and ties across page boundaries.
func TestPageSizeIsHonoured(t *testing.T) {
	tests := []struct {
		name  string
		order string
		run   func(t *testing.T, r *rig) []string
	}{
		{"oldest first with arrivals", "oldest_first", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(300, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, feed(r.sim, 3, 10*time.Millisecond, time.Second, veiltest.EventSpec{})()...)
		}},
		{"newest first with arrivals", "newest_first", func(t *testing.T, r *rig) []string {
			want := r.sim.AddEvents(300, veiltest.EventSpec{})
			_, stop := r.run()
			t.Cleanup(stop)
			return append(want, feed(r.sim, 3, 10*time.Millisecond, time.Second, veiltest.EventSpec{})()...)
		}},
		{"ties spanning many pages, newest first", "newest_first", tiesAcrossPages},
		{"ties spanning many pages, oldest first", "oldest_first", tiesAcrossPages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: tt.order, InitialTasks: -1}, tt.order, "earliest")
			r.ev.PageSize = 7
			rec := subscribe(t, r.nats.URL())
			want := tt.run(t, r)
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 30*time.Second))
			sevens := 0
			for _, q := range r.sim.Requests() {
				if q.Path != "/api/events/" {
					continue
				}
				v, err := url.ParseQuery(q.Query)
				if err != nil {
					t.Fatal(err)
				}
				limit, err := strconv.Atoi(v.Get("limit"))
				if err != nil || limit > 7 {
					t.Fatalf("events requested with limit %q, want at most 7", v.Get("limit"))
				}
				if limit == 7 {
					sevens++
				}
			}
			if sevens == 0 {
				t.Fatal("no page of 7 was read")
			}
		})
	}
}

// tiesAcrossPages: groups of events sharing one created instant, larger than a page, before
// and while the forwarder runs.
func tiesAcrossPages(t *testing.T, r *rig) []string {
	want := r.sim.AddEvents(20, veiltest.EventSpec{})
	want = append(want, r.sim.AddEvents(30, veiltest.EventSpec{SameCreated: true})...)
	fw, stop := r.run()
	t.Cleanup(stop)
	testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published > 0 }, "publishing under way")
	return append(want, r.sim.AddEvents(25, veiltest.EventSpec{SameCreated: true})...)
}

// TestACycleWithNewEventsReadsTheListOnce: a cycle that finds a few new events publishes them
// from the page it located the boundary on, without asking the platform for it again; the
// events still arrive exactly once in order.
func TestACycleWithNewEventsReadsTheListOnce(t *testing.T) {
	for _, order := range []string{"newest_first", "oldest_first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: order, InitialTasks: -1}, order, "earliest")
			r.ev.PollInterval = 2 * time.Second // cycles far apart: one of them in the window below
			rec := subscribe(t, r.nats.URL())
			want := r.sim.AddEvents(20, veiltest.EventSpec{})
			fw, stop := r.run()
			t.Cleanup(stop)
			testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published == 20 }, "the first 20 events published")
			from := time.Now()
			want = append(want, r.sim.AddEvents(5, veiltest.EventSpec{})...)
			var until time.Time
			for deadline := time.Now().Add(10 * time.Second); fw.Status().Published < 25; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("published %d of 25", fw.Status().Published)
				}
			}
			until = time.Now()
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 10*time.Second))
			// The cycle that published them began less than a poll interval before; one that
			// began while the events were being added may have found none, a poll earlier.
			if recent := until.Add(-3 * r.ev.PollInterval / 4); recent.After(from) {
				from = recent
			}
			var pages []string
			for _, q := range r.sim.Requests() {
				if q.Path == "/api/events/" && q.Start.After(from) && q.Start.Before(until) && !strings.Contains("&"+q.Query, "&limit=1&") {
					pages = append(pages, q.Query)
				}
			}
			if len(pages) != 1 {
				t.Errorf("the cycle that published the new events read %d pages (%v), want 1", len(pages), pages)
			}
		})
	}
}

// natsStoppedWhileArriving stops NATS once publishing is under way, for natsOutage while events
// keep arriving, and starts it again.
func natsStoppedWhileArriving(t *testing.T, r *rig) []string {
	want := r.sim.AddEvents(500, veiltest.EventSpec{})
	fw, stop := r.run()
	t.Cleanup(stop)
	wait := feed(r.sim, 3, 10*time.Millisecond, 2*time.Second+natsOutage(), veiltest.EventSpec{})
	testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published > 0 }, "publishing under way")
	r.nats.Stop()
	testutil.Eventually(t, 10*time.Second, func() bool { return !r.conn.Connected() }, "NATS seen gone")
	// The outage lasts while events keep arriving: natsOutage's worth of them (3 a tick).
	backlog := fw.Status().Backlog
	grow := int(natsOutage()/(10*time.Millisecond)) * 3 / 2
	testutil.Eventually(t, 2*natsOutage()+10*time.Second, func() bool { return fw.Status().Backlog >= backlog+grow }, "%d events arriving during the outage", grow)
	r.nats.Start()
	return append(want, wait()...)
}
