// Tests of the fence: with replicas, a forwarder whose lease ended publishes and saves nothing more.

package forwarder

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestFencedForwarderPublishesAndSavesNothing: while the fence holds, events go out; once it
// says the lease ran out (a paused owner waking up, a renewal answered late), the next events
// are neither published nor is the position moved past the last one saved, and the forwarder
// waits; when a renewal regains the lease it goes on, every event once, and it returns when
// its context ends (the lease ended).
func TestFencedForwarderPublishesAndSavesNothing(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	recv := subscribe(t, r.nats.URL())
	var held atomic.Bool
	held.Store(true)
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream,
		Logger: log.NewNopLogger(), Fence: held.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()

	first := r.sim.AddEvents(30, veiltest.EventSpec{})
	got := recv.waitFor(t, len(first), 20*time.Second)
	exactlyOnceInOrder(t, "prod", first, got)
	// The position of the first 30 is saved once the sender is done with them.
	cp, err := newFileCheckpoint(r.ev.Checkpoint.Dir, "prod")
	if err != nil {
		t.Fatal(err)
	}
	var saved position
	testutil.Eventually(t, 10*time.Second, func() bool {
		p, ok, err := cp.Load(context.Background())
		saved = p
		return err == nil && ok && slices.Contains(p.IDs, first[len(first)-1])
	}, "the position of the first events to be saved")

	held.Store(false)
	second := r.sim.AddEvents(30, veiltest.EventSpec{})
	testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Fenced > 0 }, "forwarding to wait at the fence")
	if n := recv.stored(); n != uint64(len(first)) {
		t.Errorf("stream holds %d events, want the %d published before the fence closed", n, len(first))
	}
	p, _, err := cp.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !p.Created.Equal(saved.Created) || len(p.IDs) != len(saved.IDs) {
		t.Errorf("position moved after the fence closed: %+v, was %+v", p, saved)
	}
	if fw.Status().Stopped {
		t.Error("a fenced forwarder reports itself stopped by a conflict (that would mark the replica unhealthy)")
	}

	held.Store(true) // a renewal regained the lease
	all := append(append([]string(nil), first...), second...)
	exactlyOnceInOrder(t, "prod", all, recv.waitFor(t, len(all), 20*time.Second))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil once its context ended", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestLeaseHolderAdoptsAFormerOwnersLateWrite: a former owner paused past its lease resumes
// with a save of the position in flight, which lands after the new owner read the position.
// The new owner holds the lease: it must not stop (nobody would forward the controller while
// its lease is held, the bug the nemesis found) but store its own position over the stale one,
// read the stream again and go on, every event once. Without a lease the same conflict stops
// the forwarder (TestSecondInstanceLosesTheKVPosition).
func TestLeaseHolderAdoptsAFormerOwnersLateWrite(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	recv := subscribe(t, r.nats.URL())
	ctx := context.Background()
	cp, err := newKVCheckpoint(r.stream, "prod")
	if err != nil {
		t.Fatal(err)
	}
	fw, err := newForwarder(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream,
		Logger: log.NewNopLogger(), Fence: func() bool { return true }}, cp)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fw.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	first := r.sim.AddEvents(10, veiltest.EventSpec{})
	recv.waitFor(t, len(first), 20*time.Second)
	// The former owner's late write: an older position, from another instance.
	former, _ := newKVCheckpoint(r.stream, "prod")
	if _, _, err := former.Load(ctx); err != nil {
		t.Fatal(err)
	}
	stale := position{Known: true, Created: time.Unix(1, 0).UTC(), IDs: []string{"stale"}}
	if err := former.Save(ctx, stale); err != nil {
		t.Fatal(err)
	}
	second := r.sim.AddEvents(10, veiltest.EventSpec{})
	all := append(append([]string(nil), first...), second...)
	exactlyOnceInOrder(t, "prod", all, recv.waitFor(t, len(all), 20*time.Second))
	testutil.Eventually(t, 10*time.Second, func() bool {
		p, ok, err := former.Load(ctx)
		return err == nil && ok && slices.Contains(p.IDs, second[len(second)-1])
	}, "the lease holder's position stored over the stale one")
	st := fw.Status()
	if st.Stopped {
		t.Fatalf("the lease holder stopped forwarding: %s", st.LastError)
	}
	if st.PositionAdoptions == 0 {
		t.Error("veil_events_position_adoptions_total did not count the late write")
	}
	if st.Conflicts != 0 {
		t.Errorf("%d publishes refused, want none (the stream was not written by the former owner)", st.Conflicts)
	}
}
