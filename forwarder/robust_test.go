package forwarder

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// lostReplyKV applies writes on the server and then, while lose is positive, reports a timeout
// instead of the reply: the write happened, the writer does not know it.
type lostReplyKV struct {
	jetstream.KeyValue
	lose atomic.Int32
}

func (l *lostReplyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := l.KeyValue.Create(ctx, key, value, opts...)
	return l.reply(rev, err)
}

func (l *lostReplyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := l.KeyValue.Update(ctx, key, value, last)
	return l.reply(rev, err)
}

func (l *lostReplyKV) reply(rev uint64, err error) (uint64, error) {
	if err == nil && l.lose.Add(-1) >= 0 {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// TestKVCheckpointLostReplyIsNotAConflict proves that a write applied on the server whose reply
// was lost does not make the next write a false conflict, while a real second instance still
// conflicts (also when it stores the very same position).
// lostReplyCase is what happens to the position store before the owner saves again, and whether that save must be a conflict.
type lostReplyCase struct {
	name string
	// before runs on the owner (a) and may use a second instance (b) on the same key.
	before       func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, b checkpoint)
	wantConflict bool
}

func TestKVCheckpointLostReplyIsNotAConflict(t *testing.T) {
	r := newRig(t, veiltest.Options{InitialTasks: -1}, "auto", "earliest")
	for i, tt := range lostReplyCases() {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			controller := "ctl" + string(rune('a'+i))
			cp, err := newKVCheckpoint(r.stream, controller)
			if err != nil {
				t.Fatal(err)
			}
			a := cp.(*kvCheckpoint)
			if err := a.open(ctx); err != nil {
				t.Fatal(err)
			}
			lost := &lostReplyKV{KeyValue: a.kv}
			a.kv = lost
			b, _ := newKVCheckpoint(r.stream, controller)
			tt.before(t, a, lost, b)

			err = a.Save(ctx, pos("next"))
			if tt.wantConflict {
				if !errors.Is(err, errCheckpointConflict) {
					t.Fatalf("Save after another instance wrote: err=%v, want errCheckpointConflict", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Save after a lost reply: %v, want success", err)
			}
			mustSave(t, a, pos("after"))
			got, ok, err := b.Load(ctx)
			if err != nil || !ok || len(got.IDs) != 1 || got.IDs[0] != "after" {
				t.Fatalf("stored %+v ok=%v err=%v, want the owner's last position", got, ok, err)
			}
		})
	}
}

// lostReplyCases are the rows of TestKVCheckpointLostReplyIsNotAConflict.
func lostReplyCases() []lostReplyCase {
	return []lostReplyCase{
		{
			name: "lost reply to the first write (create)",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ checkpoint) {
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p1")))
			},
		},
		{
			name: "lost reply to an update",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p2")))
			},
		},
		{
			name: "several lost replies in a row",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(3)
				for _, id := range []string{"p2", "p3", "p4"} {
					mustFailNotConflict(t, a.Save(context.Background(), pos(id)))
				}
			},
		},
		{
			name: "second instance took over after a lost reply",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, b checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p2")))
				if _, _, err := b.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := b.Save(context.Background(), pos("other")); err != nil {
					t.Fatal(err)
				}
			},
			wantConflict: true,
		},
		{
			name: "second instance wrote the same position",
			before: func(t *testing.T, a *kvCheckpoint, _ *lostReplyKV, b checkpoint) {
				mustSave(t, a, pos("p1"))
				if _, _, err := b.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := b.Save(context.Background(), pos("p1")); err != nil {
					t.Fatal(err)
				}
			},
			wantConflict: true,
		},
	}
}

func pos(id string) position {
	return position{Known: true, Created: time.Unix(1700000000, 0).UTC(), IDs: []string{id}}
}

func mustSave(t *testing.T, cp checkpoint, p position) {
	t.Helper()
	if err := cp.Save(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func mustFailNotConflict(t *testing.T, err error) {
	t.Helper()
	if err == nil || errors.Is(err, errCheckpointConflict) {
		t.Fatalf("Save with a lost reply: err=%v, want a plain failure", err)
	}
}

// brokenCheckpoint fails every Save while broken, like a full disk or an unreachable bucket.
type brokenCheckpoint struct {
	checkpoint
	broken   atomic.Bool
	failures atomic.Int32
}

func (b *brokenCheckpoint) Save(ctx context.Context, p position) error {
	if b.broken.Load() {
		b.failures.Add(1)
		return errors.New("no space left on device")
	}
	return b.checkpoint.Save(ctx, p)
}

// TestFailedSaveIsRetriedWhileTheJournalIsQuiet proves that a position that could not be stored
// is stored once the store works again, with no new event to trigger a save, and that the
// failure is shown in the status and counted meanwhile.
func TestFailedSaveIsRetriedWhileTheJournalIsQuiet(t *testing.T) {
	tests := []struct {
		name   string
		events int
	}{
		{"one batch", 3},
		{"several batches", 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "oldest_first", "earliest")
			r.ev.PollInterval = 20 * time.Millisecond
			r.nc.JetStream.MaxPending = 20 // batches of 5
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			file, err := newFileCheckpoint(r.ev.Checkpoint.Dir, "prod")
			if err != nil {
				t.Fatal(err)
			}
			mustSave(t, file, position{Known: true}) // stored before: Run does not save at start
			cp := &brokenCheckpoint{checkpoint: file}
			cp.broken.Store(true)
			ids := r.sim.AddEvents(tt.events, veiltest.EventSpec{})
			fw, err := newForwarder(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream, Logger: log.NewNopLogger()}, cp)
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- fw.Run(rctx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			// Each failed save is counted right after the store refused it.
			testutil.Eventually(t, 20*time.Second, func() bool {
				fw.obs.mu.Lock()
				counted := fw.obs.pubErrors
				fw.obs.mu.Unlock()
				return cp.failures.Load() >= 3 && counted >= 3 && strings.Contains(fw.Status().LastError, "no space left")
			}, "three failed saves counted in veil_events_publish_errors_total and shown in the status")
			if got, _, _ := file.Load(ctx); len(got.IDs) != 0 {
				t.Fatalf("stored %v while the store was broken", got.IDs)
			}

			cp.broken.Store(false) // no event is added from here on
			want := ids[len(ids)-1]
			testutil.Eventually(t, 20*time.Second, func() bool {
				got, _, _ := file.Load(ctx)
				return len(got.IDs) > 0 && got.IDs[len(got.IDs)-1] == want
			}, "the position stored once the store works")
			if got, _, err := file.Load(ctx); err != nil || len(got.IDs) == 0 || got.IDs[len(got.IDs)-1] != want {
				t.Fatalf("stored %+v (err %v), want up to %s once the store works", got, err, want)
			}
			if st := fw.Status(); st.Published != uint64(tt.events) {
				t.Errorf("published %d, want %d", st.Published, tt.events)
			}
		})
	}
}

// TestKVLostReplyDoesNotStopForwarding proves end to end that a position write applied on the
// server whose reply was lost neither stops the forwarder nor loses or repeats an event.
func TestKVLostReplyDoesNotStopForwarding(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "oldest_first", "earliest")
	r.ev.PollInterval = 20 * time.Millisecond
	rec := subscribe(t, r.nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cp, err := newKVCheckpoint(r.stream, "prod")
	if err != nil {
		t.Fatal(err)
	}
	kvcp := cp.(*kvCheckpoint)
	if err := kvcp.open(ctx); err != nil {
		t.Fatal(err)
	}
	lost := &lostReplyKV{KeyValue: kvcp.kv}
	kvcp.kv = lost
	fw, err := newForwarder(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream, Logger: log.NewNopLogger()}, cp)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	var want []string
	for round := range 3 {
		lost.lose.Store(1) // the next position write is applied, its reply lost
		want = append(want, r.sim.AddEvents(5, veiltest.EventSpec{})...)
		testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published >= uint64(len(want)) }, "%d events published", len(want))
		if st := fw.Status(); st.Stopped || st.Published != uint64(len(want)) {
			t.Fatalf("round %d: published %d of %d, stopped %v (%s)", round, st.Published, len(want), st.Stopped, st.LastError)
		}
	}
	exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 10*time.Second))
	other, _ := newKVCheckpoint(r.stream, "prod")
	testutil.Eventually(t, 20*time.Second, func() bool {
		got, _, _ := other.Load(ctx)
		return len(got.IDs) > 0 && got.IDs[len(got.IDs)-1] == want[len(want)-1]
	}, "the last position stored")
	if ctx.Err() != nil {
		t.Fatal("the position of the last event was never stored")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// messagesOf builds the messages of events as a cycle does, each with the position it resumes from.
func messagesOf(fw *Forwarder, events []veil.Event) []*nats.Msg {
	var pos position
	msgs := make([]*nats.Msg, len(events))
	for i := range events {
		pos.advance(events[i].Created.Time, events[i].ID)
		msgs[i], _ = (&envelope{prefix: fw.out.stream.cfg.SubjectPrefix, controller: fw.opts.Controller, source: fw.source, order: oldestFirst}).message(&events[i], &pos)
	}
	return msgs
}

// TestStreamRefusesWhatDoesNotFollowItsNewestMessage proves that the expectation each publish
// carries is the fence: a batch whose acknowledgement was lost across a reconnect, or a replica
// that lost its lease, cannot store anything that does not follow the controller's newest message
// on the stream, whatever the duplicate window; read again from the stream, publishing goes on in
// order.
func TestStreamRefusesWhatDoesNotFollowItsNewestMessage(t *testing.T) {
	tests := []struct {
		name      string
		reconnect bool // NATS restarts between the two publishes
		stale     bool // the second publish comes from another forwarder that read the stream first
	}{
		{"an acknowledgement lost across a reconnect", true, false},
		{"a replica publishing after another one did", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "oldest_first", "earliest")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ids := r.sim.AddEvents(6, veiltest.EventSpec{})
			pg, err := r.cli.EventsPage(ctx, 0, 6, "created")
			if err != nil || len(pg.Results) != 6 {
				t.Fatalf("events: %v (%d)", err, len(pg.Results))
			}
			first, second := pg.Results[:3], pg.Results[3:]
			a, b := r.forwarder(), r.forwarder()
			for _, fw := range []*Forwarder{a, b} {
				if err := fw.syncFromStream(ctx); err != nil || fw.out.seq != 0 {
					t.Fatalf("sync on an empty stream: seq %d, %v", fw.out.seq, err)
				}
			}
			// a stores the first three; its acknowledgement is dropped (a.seq stays 0).
			if n, _, err := a.out.pub.publish(ctx, messagesOf(a, first), 0); err != nil || n != 3 {
				t.Fatalf("first batch: %d, %v", n, err)
			}
			if tt.reconnect {
				before := r.conn.Generation()
				r.nats.Stop()
				r.nats.Start()
				testutil.Eventually(t, 20*time.Second, func() bool { return r.conn.Generation() != before && r.conn.Connected() }, "reconnected")
				waitStored(ctx, t, r, 3)
			}
			next := a
			if tt.stale {
				next = b
			}
			// Events the stream has not seen (no duplicate window can catch them), after a sequence
			// the stream moved past: refused, nothing stored.
			if _, _, err := next.out.pub.publish(ctx, messagesOf(next, second), 0); !errors.Is(err, errConflict) {
				t.Fatalf("publish expecting a stale sequence: %v, want a conflict", err)
			}
			if n := streamMsgs(ctx, t, r); n != 3 {
				t.Fatalf("%d messages stored after the refused publish, want 3", n)
			}
			// Read again from the stream, the position is the third event, and the rest follows.
			if err := next.syncFromStream(ctx); err != nil {
				t.Fatal(err)
			}
			if st := next.Status(); st.StreamSeq != 3 || len(st.PositionIDs) != 1 || st.PositionIDs[0] != ids[2] {
				t.Fatalf("position from the stream: seq %d ids %v, want 3 and %s", st.StreamSeq, st.PositionIDs, ids[2])
			}
			if n, last, err := next.out.pub.publish(ctx, messagesOf(next, second), next.out.seq); err != nil || n != 3 || last != 6 {
				t.Fatalf("publish after reading the stream: %d up to %d, %v", n, last, err)
			}
			rec := subscribe(t, r.nats.URL())
			exactlyOnceInOrder(t, "prod", ids, rec.waitFor(t, 6, 10*time.Second))
		})
	}
}

func streamMsgs(ctx context.Context, t *testing.T, r *rig) uint64 {
	t.Helper()
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, "VEIL_EVENTS")
	if err != nil {
		return ^uint64(0)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return ^uint64(0)
	}
	return info.State.Msgs
}

// waitStored waits until the stream answers and holds n messages.
func waitStored(ctx context.Context, t *testing.T, r *rig, n uint64) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() bool { return streamMsgs(ctx, t, r) == n }, "the stream to hold %d messages", n)
}
