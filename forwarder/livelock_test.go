package forwarder

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestProgressWhileTheListMovesAtEveryRequest runs the forwarder against a journal that moves
// between any two of its requests (a steady event rate with 20 ms per request; oldest first at the
// retention cap every new event deletes the oldest one) and proves that it keeps up while the
// list moves: the list moves for at least 3 s and until the forwarder has published two pages
// during it (a livelock published nothing; how much more depends on how fast the machine is,
// which is not asserted), then everything once caught up, exactly once and in order, and no gap
// is counted. Before pages overlapped by a slack, each of these cases published nothing until
// the rate stopped (and at the retention cap the forwarder's own stall deleted its events unread).
func TestProgressWhileTheListMovesAtEveryRequest(t *testing.T) {
	tests := []struct {
		name      string
		order     string
		retention int
		backlog   int
		start     string
		rate      float64
	}{
		{"newest first from the latest event, 100 events/s", "newest_first", 0, 200, "latest", 100},
		{"newest first reading a 2,000 backlog while 500 events/s arrive", "newest_first", 0, 2000, "earliest", 500},
		{"oldest first reading a 2,000 backlog while 500 events/s arrive", "oldest_first", 0, 2000, "earliest", 500},
		{"oldest first at a retention cap of 3,000 with 500 events/s deleting from the head", "oldest_first", 3000, 3000, "latest", 500},
	}
	const run = 3 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: tt.order, EventsRetention: tt.retention, InitialTasks: -1}, tt.order, tt.start)
			rec := subscribe(t, r.nats.URL())
			r.sim.AddEvents(tt.backlog, veiltest.EventSpec{})
			before := journalIDs(t, r)
			r.sim.SetLatency(20*time.Millisecond, 0)
			fw, stop := r.run()
			t.Cleanup(stop)
			if tt.start == "latest" {
				testutil.Eventually(t, 10*time.Second, func() bool { return !fw.Status().Position.IsZero() }, "a position after the newest event")
			}
			began := fw.Status().Published
			r.sim.SetEventRate(tt.rate)
			moving := time.Now()
			testutil.Eventually(t, time.Minute, func() bool {
				return time.Since(moving) >= run && fw.Status().Published >= began+2*pageLimit
			}, "two pages published while the list moves")
			during := fw.Status().Published
			r.sim.SetEventRate(0)

			r.sim.SetLatency(0, 0)
			after := journalIDs(t, r)
			want := after
			if tt.start == "latest" {
				last := before[len(before)-1]
				i := slices.Index(after, last)
				if i < 0 {
					t.Fatalf("the newest event before the run (%s) is gone: the run outgrew the retention", last)
				}
				want = after[i+1:]
			} else if tt.retention == 0 && !slices.Equal(after[:len(before)], before) {
				t.Fatal("the journal changed its history")
			}
			if len(want) < int(tt.rate*run.Seconds())/2 {
				t.Fatalf("only %d events due; the simulator's rate did not run", len(want))
			}
			// Caught up once the list holds still: however long that takes on this machine.
			got := rec.waitFor(t, len(want), time.Minute)
			exactlyOnceInOrder(t, "prod", want, got)
			t.Logf("published %d of %d events while the list moved", during, len(want))
			if s := fw.Status(); s.Gaps != 0 {
				t.Errorf("%d events counted lost; nothing was deleted unread", s.Gaps)
			}
		})
	}
}

// journalIDs reads the whole journal oldest first while it holds still.
func journalIDs(t *testing.T, r *rig) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for off := 0; ; off += pageLimit {
		pg, err := r.cli.EventsPage(ctx, off, pageLimit, "created")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range pg.Results {
			ids = append(ids, e.ID)
		}
		if len(pg.Results) == 0 || off+pageLimit >= pg.Count {
			return ids
		}
	}
}

// TestSlackStaysWithinAPage proves the overlap grows with the shifts seen and after a resync but
// always leaves room for progress, and shrinks back while the list holds still.
func TestSlackStaysWithinAPage(t *testing.T) {
	tests := []struct {
		name  string
		page  int // 0: pageLimit
		start int
		do    func(s *slack)
		min   int
		max   int
	}{
		{"starts at the default", 0, 0, func(*slack) {}, startSlack, startSlack},
		{"grows at once to twice a shift", 0, startSlack, func(s *slack) { s.observe(15) }, 30 + minSlack, 30 + minSlack},
		{"never reaches a page whatever the shift", 0, startSlack, func(s *slack) { s.observe(10 * pageLimit) }, pageLimit / 2, pageLimit / 2},
		{"doubles on a resync, capped", 0, pageLimit/2 - 1, func(s *slack) { s.widen(); s.widen() }, pageLimit / 2, pageLimit / 2},
		{"shrinks back while nothing moves", 0, pageLimit / 2, func(s *slack) {
			for range 100 {
				s.observe(0)
			}
		}, minSlack, minSlack},
		{"shrinks slowly", 0, 40, func(s *slack) { s.observe(0) }, 35, 35},
		{"a small page starts within half a page", 7, 0, func(*slack) {}, 3, 3},
		{"a small page never fills with slack", 7, startSlack, func(s *slack) { s.observe(100); s.widen() }, 3, 3},
		{"the smallest page keeps the least slack and one row of progress", minPage, 0, func(s *slack) { s.widen() }, minSlack, minSlack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := tt.page
			if page == 0 {
				page = pageLimit
			}
			s := newSlack(tt.start, page)
			tt.do(s)
			if n := s.load(); n < tt.min || n > tt.max || n >= page-1 {
				t.Fatalf("slack %d, want %d..%d (and below a page)", n, tt.min, tt.max)
			}
		})
	}
}

// TestPageSizeFromConfig proves which page size events.page_size gives: the default and the cap
// at the platform's 100, and never a page too small to overlap and progress.
func TestPageSizeFromConfig(t *testing.T) {
	for _, tt := range []struct{ cfg, want int }{{0, pageLimit}, {7, 7}, {100, 100}, {250, pageLimit}, {1, minPage}, {minPage, minPage}} {
		if got := pageSize(tt.cfg, log.NewNopLogger()); got != tt.want {
			t.Errorf("page_size %d: reads pages of %d, want %d", tt.cfg, got, tt.want)
		}
	}
}
