// Tests of a replica on a slow or busy machine: every call to the bucket answers late, as a
// three-node NATS cluster starved of CPU does, and a take-over still moves only the dead
// replica's controllers.

package ha

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// slowKV answers every read and write of the bucket delay late (while delay is set); watches
// are left alone.
type slowKV struct {
	jetstream.KeyValue
	delay atomic.Int64 // nanoseconds
}

func (s *slowKV) wait(ctx context.Context) error {
	d := time.Duration(s.delay.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.KeyValue.Get(ctx, key)
}

func (s *slowKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.KeyValue.Put(ctx, key, value)
}

func (s *slowKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.KeyValue.Create(ctx, key, value, opts...)
}

func (s *slowKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.KeyValue.Update(ctx, key, value, last)
}

func (s *slowKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.KeyValue.Delete(ctx, key, opts...)
}

// TestSlowBucketTakeOverMovesOnlyTheDeadReplicasControllers: the fleet benchmark on a 2-core
// machine half as fast as the reference moved 20 controllers of live replicas when one replica
// was killed — all of one survivor's at once. Here the survivor's bucket answers every call
// 0.85 of a renew period late: its renewals still come well within the lease (one period plus
// a call, 1.85 s of the 2.4 s a lease stays valid after a renewal is sent). But the take-over
// adds the survivor's acquisitions to its round, and a round that renews only after its
// announcement and its previous round's acquisitions renewed 2.55 s after the previous
// renewal: every lease it held lapsed, was released and taken again (on the code before the
// renewer had a goroutine of its own this showed already at the end of the join, where the
// receiver of each hand-over deletes the hand-over record: "pod-b holds []" before the kill).
// The survivor must keep every controller it held, without a release.
func TestSlowBucketTakeOverMovesOnlyTheDeadReplicasControllers(t *testing.T) {
	const ttl = 3 * time.Second // renew period 1 s, as in the fleet benchmark
	const late = 850 * time.Millisecond
	n := testutil.StartNATS(t)
	w := newWorld(t, n.URL(), names("ctl", 8))
	slow := &slowKV{}
	a := w.start("pod-a", func(o *testOptions) { o.Replicas, o.LeaseTTL = 1, ttl })
	b := w.start("pod-b", func(o *testOptions) {
		o.Replicas, o.LeaseTTL = 1, ttl
		o.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { slow.KeyValue = kv; return slow }
	})
	w.waitConverged(30*time.Second, a, b)
	slow.delay.Store(int64(late))
	// Two lease times at this pace: the survivor keeps what it holds while nothing happens.
	time.Sleep(2 * ttl)
	kept := w.held(b)
	w.mu.Lock()
	released := maps.Clone(b.released)
	w.mu.Unlock()
	if len(kept) == 0 {
		t.Fatalf("before the kill: pod-b holds %v (its leases lapsed), pod-a %v", kept, w.held(a))
	}
	mine := w.held(a)

	a.cancel() // stops renewing and releases nothing in the bucket, like a killed process
	<-a.done
	testutil.Eventually(t, 20*time.Second, func() bool { return w.heldBy(w.ctrls, b) }, "pod-b to take %v over", mine)
	time.Sleep(2 * ttl) // a lapse after the take-over shows by then
	w.mu.Lock()
	for _, ct := range kept {
		if b.released[ct] != released[ct] {
			t.Errorf("pod-b released %s, which it held before the kill (%d times)", ct, b.released[ct]-released[ct])
		}
	}
	w.mu.Unlock()
	for _, l := range strings.Split(w.logs.String(), "\n") {
		if strings.Contains(l, "instance=pod-b") && strings.Contains(l, "not renewed in time") {
			t.Errorf("pod-b let a lease lapse: %s", l)
		}
	}
	if !w.heldBy(w.ctrls, b) {
		t.Errorf("pod-b holds %v of %v at the end", w.held(b), w.ctrls)
	}
}
