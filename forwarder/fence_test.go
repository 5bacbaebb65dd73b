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
// says the lease ended (a paused owner waking up after another took over), the next events
// are neither published nor is the position moved past the last one saved, and Run returns
// on its own.
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
	r.sim.AddEvents(30, veiltest.EventSpec{})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil once fenced", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after the fence closed")
	}
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
}
