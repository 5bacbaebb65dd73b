package forwarder

// The bucket's stored position stays within what NATS takes whatever Future and IDs hold: a burst
// of events within the settle time, a controller far ahead for good, or tens of thousands of
// events at one instant never make every save fail (savePosition retries until one is stored, so
// a value NATS refuses would stop forwarding).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestAStoredPositionWithManyEventsAheadOrAtOneInstantFitsTheBucket(t *testing.T) {
	r := newRig(t, veiltest.Options{InitialTasks: -1}, "oldest_first", "earliest")
	cp, err := newKVCheckpoint(r.stream, "prod")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := position{Created: at, Known: true}
	const m = 3 * maxStoredIDs // about 1 MB as JSON
	for i := range m {
		p.IDs = append(p.IDs, fmt.Sprintf("%08d-0000-4000-8000-00000000000a", i))
	}
	const n = 3 * maxStoredFuture // about 1.2 MB as JSON: over NATS's 1 MB max_payload
	for i := range n {
		p.addFuture(at.Add(time.Duration(i+1)*time.Microsecond), fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), uint64(i+1))
	}
	if err := cp.Save(context.Background(), p); err != nil {
		t.Fatalf("saving a position with %d events ahead and %d at its instant: %v", n, m, err)
	}
	got, ok, err := cp.Load(context.Background())
	if err != nil || !ok {
		t.Fatalf("load: %v, %v", ok, err)
	}
	if len(got.Future) != maxStoredFuture || got.Future[0].ID != p.Future[n-maxStoredFuture].ID || got.Future[maxStoredFuture-1].ID != p.Future[n-1].ID {
		t.Fatalf("stored %d events ahead (%s..), want the newest %d", len(got.Future), got.Future[0].ID, maxStoredFuture)
	}
	if !got.Created.Equal(p.Created) || len(got.IDs) != maxStoredIDs || got.IDs[0] != p.IDs[m-maxStoredIDs] || got.IDs[maxStoredIDs-1] != p.IDs[m-1] {
		t.Errorf("stored position %s with %d ids (%s..), want %s with the newest %d", got.Created, len(got.IDs), got.IDs[0], p.Created, maxStoredIDs)
	}
}
