package forwarder

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestTheStreamIsThePosition proves that a restarted forwarder resumes after its controller's
// newest message on the stream, whatever the stored position says: a lost position volume
// republishes nothing (with either events.start) and skips nothing created while it was down, and
// a stream that lost its newest acknowledged messages (as a power loss of NATS does) gets them
// again from the journal, counted as a rewind and, event by event, as republished. The duplicate window plays no part: a resend would
// be refused by the stream and counted as a conflict, and none is.
func TestTheStreamIsThePosition(t *testing.T) {
	const before, during, lostTail = 130, 40, 25
	tests := []struct {
		name        string
		start       string
		wipeVolume  bool // the state directory is emptied while the forwarder is stopped
		loseTail    bool // the stream's newest messages are lost while the forwarder is stopped
		wantRewinds uint64
		wantRepub   uint64 // events published again: the lost tail, when the position knew it
	}{
		{"position volume lost, start earliest", "earliest", true, false, 0, 0},
		{"position volume lost, start latest", "latest", true, false, 0, 0},
		{"the stream lost its newest messages", "earliest", false, true, 1, lostTail},
		// Nothing stored says more than the stream: the tail is published again all the same,
		// but nothing can tell it was lost.
		{"both lost", "latest", true, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
			r.ev.PollInterval = 20 * time.Millisecond
			r.nc.JetStream.MaxPending = 40 // several batches per cycle
			ids := r.sim.AddEvents(before, veiltest.EventSpec{})
			fw, stop := r.run()
			testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published == before }, "the first %d events published", before)
			stop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tt.wipeVolume {
				entries, _ := os.ReadDir(r.ev.Checkpoint.Dir)
				for _, e := range entries {
					if err := os.RemoveAll(filepath.Join(r.ev.Checkpoint.Dir, e.Name())); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tt.loseTail {
				s, err := r.stream.js.Stream(ctx, "VEIL_EVENTS")
				if err != nil {
					t.Fatal(err)
				}
				for seq := uint64(before - lostTail + 1); seq <= before; seq++ {
					if err := s.DeleteMsg(ctx, seq); err != nil {
						t.Fatalf("delete %d: %v", seq, err)
					}
				}
				// A restart rebuilds the duplicate window from what the store holds, as after a
				// power loss: the lost messages' ids are forgotten with them.
				r.nats.Stop()
				r.nats.Start()
			}
			ids = append(ids, r.sim.AddEvents(during, veiltest.EventSpec{})...)
			r.ev.Start = tt.start
			fw, stop = r.run()
			defer stop()
			rec := subscribe(t, r.nats.URL())
			got := rec.waitFor(t, len(ids), 20*time.Second)
			// The lost tail is stored again after what survived, then what came while down: in
			// the journal's order either way.
			exactlyOnceInOrder(t, "prod", ids, got)
			st := fw.Status()
			if st.Conflicts != 0 || st.Rewinds != tt.wantRewinds || st.Duplicates != 0 {
				t.Errorf("conflicts %d, rewinds %d (want %d), duplicates %d", st.Conflicts, st.Rewinds, tt.wantRewinds, st.Duplicates)
			}
			if st.Republished != tt.wantRepub {
				t.Errorf("republished %d, want %d", st.Republished, tt.wantRepub)
			}
			if got := counterValue(t, fw, "veil_events_republished_total"); got != float64(tt.wantRepub) {
				t.Errorf("veil_events_republished_total = %v, want %d", got, tt.wantRepub)
			}
			if tt.wantRewinds > 0 && (st.LastRewind.At.IsZero() || !st.LastRewind.To.Before(st.LastRewind.From)) {
				t.Errorf("last rewind %+v: want it noticed, from the stored position back to the stream's", st.LastRewind)
			}
		})
	}
}

// counterValue is the value of fw's one counter series name (-1: not exported).
func counterValue(t *testing.T, fw *Forwarder, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(fw); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// TestPositionHeadersRoundTrip proves that what a message carries is enough to resume from it
// alone, ties at one instant included, and that a message published before the headers existed
// still gives its event's instant and id.
func TestPositionHeadersRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 24, 10, 0, 0, 123456789, time.FixedZone("MSK", 3*3600))
	var pos position
	pos.advance(at, "a")
	pos.advance(at, "b")
	h := nats.Header{}
	positionHeaders(h, &pos, newestFirst)
	got, err := streamPosition(h, nil)
	if err != nil || !got.Created.Equal(at) || len(got.IDs) != 2 || got.IDs[1] != "b" || !got.Known {
		t.Fatalf("from headers %v: %+v, %v", h, got, err)
	}
	if h.Get(hdrOrder) != "newest_first" || h.Get(hdrCreated) != "2026-11-24T07:00:00.123456789Z" {
		t.Errorf("order %q, created %q", h.Get(hdrOrder), h.Get(hdrCreated))
	}
	body, _ := json.Marshal(map[string]string{"id": "old", "created": "2021-08-20T10:08:09.761081Z"})
	got, err = streamPosition(nats.Header{nats.MsgIdHdr: {"prod.old"}}, body)
	if err != nil || got.IDs[0] != "old" || got.Created.Format(time.RFC3339Nano) != "2021-08-20T10:08:09.761081Z" {
		t.Fatalf("from a body: %+v, %v", got, err)
	}
	if _, err := streamPosition(nats.Header{hdrCreated: {"yesterday"}}, body); err == nil {
		t.Error("a malformed header was taken")
	}
}

// TestPositionCompare orders positions as published events: by instant, then by the ids
// published at that instant.
func TestPositionCompare(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(d time.Duration, ids ...string) position {
		return position{Created: t0.Add(d), IDs: ids, Known: true}
	}
	tests := []struct {
		name string
		a, b position
		want int
	}{
		{"earlier instant", p(0, "a"), p(time.Second, "b"), -1},
		{"later instant", p(time.Second, "b"), p(0, "a"), 1},
		{"same", p(0, "a", "b"), p(0, "b", "a"), 0},
		{"fewer ties published", p(0, "a"), p(0, "a", "b"), -1},
		{"more ties published", p(0, "a", "b"), p(0, "a"), 1},
		{"nothing published yet", position{}, p(0, "a"), -1},
		{"both unknown", position{}, position{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.compare(tt.b); got != tt.want {
				t.Errorf("compare = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestIDList: the ids a message lists are the JSON json.Marshal writes, for any ids.
func TestIDList(t *testing.T) {
	for _, ids := range [][]string{nil, {}, {"a"}, {"6f1d2c3e-0000-4000-8000-000000000001", "b"}, {`q"`, `b\s`}, {"<&>"}, {"é", "\x01", "\xff"}, {"a", "\u2028"}} {
		want, _ := json.Marshal(ids)
		if got := idList(ids); got != string(want) {
			t.Errorf("idList(%q) = %s, want %s", ids, got, want)
		}
	}
}

// TestANewestMessageHoldingLessIsDoubted: the stream's newest message of the controller that
// holds less than the position is a node not caught up (read again) until it has been answered
// for staleGrace: then it is messages NATS lost (a rewind). Another such answer starts the grace
// again.
func TestANewestMessageHoldingLessIsDoubted(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var s streamSide // just started: nothing acknowledged yet
	for _, step := range []struct {
		seq   uint64
		after time.Duration // since at
		doubt bool
	}{
		{seq: 22, after: 0, doubt: true},
		{seq: 22, after: staleGrace - time.Millisecond, doubt: true},
		{seq: 180, after: staleGrace, doubt: true}, // another answer: its grace starts now
		{seq: 180, after: 2*staleGrace - time.Millisecond, doubt: true},
		{seq: 180, after: 2 * staleGrace, doubt: false},
		{seq: 180, after: 3 * staleGrace, doubt: false},
	} {
		if got := s.doubt(step.seq, at.Add(step.after)); got != step.doubt {
			t.Errorf("newest %d at +%s: doubted %v, want %v", step.seq, step.after, got, step.doubt)
		}
	}
}
