package forwarder

// The bucket's stored position stays within what NATS takes whatever Future holds: a burst of
// events within the settle time, or a controller far ahead for good, never makes every save fail
// (savePosition retries until one is stored, so a value NATS refuses would stop forwarding).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestAStoredPositionWithManyEventsAheadFitsTheBucket(t *testing.T) {
	r := newRig(t, veiltest.Options{InitialTasks: -1}, "oldest_first", "earliest")
	cp, err := newKVCheckpoint(r.stream, "prod")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := position{Created: at, IDs: []string{"w"}, Known: true}
	const n = 3 * maxStoredFuture // about 1.2 MB as JSON: over NATS's 1 MB max_payload
	for i := range n {
		p.addFuture(at.Add(time.Duration(i+1)*time.Microsecond), fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), uint64(i+1))
	}
	if err := cp.Save(context.Background(), p); err != nil {
		t.Fatalf("saving a position with %d events ahead: %v", n, err)
	}
	got, ok, err := cp.Load(context.Background())
	if err != nil || !ok {
		t.Fatalf("load: %v, %v", ok, err)
	}
	if len(got.Future) != maxStoredFuture || got.Future[0].ID != p.Future[n-maxStoredFuture].ID || got.Future[maxStoredFuture-1].ID != p.Future[n-1].ID {
		t.Fatalf("stored %d events ahead (%s..), want the newest %d", len(got.Future), got.Future[0].ID, maxStoredFuture)
	}
	if !got.Created.Equal(p.Created) || len(got.IDs) != 1 {
		t.Errorf("stored position %s %v, want %s %v", got.Created, got.IDs, p.Created, p.IDs)
	}
}
