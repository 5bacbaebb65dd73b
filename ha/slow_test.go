// Tests of a replica on a slow or busy machine: every call to the bucket answers late, as a
// three-node NATS cluster starved of CPU does, and a take-over still moves only the dead
// replica's controllers.

package ha

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// slowKV answers every read and write of the bucket delay late (while delay is set); watches
// are left alone, and so are renewals when spareRenewals is set (an update of a lease acquired
// more than spareRenewals ago: a renewal carries its acquisition's since).
type slowKV struct {
	jetstream.KeyValue
	delay         atomic.Int64 // nanoseconds
	spareRenewals time.Duration
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
	var r leaseRecord
	renewal := s.spareRenewals > 0 && strings.HasPrefix(key, leasePrefix) &&
		json.Unmarshal(value, &r) == nil && time.Since(r.Since) > s.spareRenewals
	if renewal {
		return s.KeyValue.Update(ctx, key, value, last)
	}
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
// was killed — all of one survivor's at once. Its renewals waited behind its other calls to the
// bucket: a round renewed only after its announcement and its previous round's acquisitions.
// Here every call of the survivor but its renewals answers 0.9 of a renew period late: a
// renewal that waits behind the announcement and the take-over's acquisitions goes 2.8 periods
// after the last, past the 2.4 a lease holds, and every lease it held lapsed, was released and
// taken again (on the code before the renewer had a goroutine of its own this showed already
// at the end of the join, where the receiver of each hand-over deletes the hand-over record:
// "pod-b holds []" before the kill). Renewals on their own goroutine are not delayed by any of
// it, whatever this machine's speed. The survivor must keep every controller it held, without
// a release.
func TestSlowBucketTakeOverMovesOnlyTheDeadReplicasControllers(t *testing.T) {
	const ttl = 3 * time.Second // renew period 1 s, as in the fleet benchmark
	const late = ttl / 3 * 9 / 10
	n := testutil.StartNATS(t)
	w := newWorld(t, n.URL(), names("ctl", 8))
	slow := &slowKV{spareRenewals: ttl / 6}
	a := w.start("pod-a", func(o *testOptions) { o.Replicas, o.LeaseTTL = 1, ttl })
	b := w.start("pod-b", func(o *testOptions) {
		o.Replicas, o.LeaseTTL = 1, ttl
		o.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { slow.KeyValue = kv; return slow }
	})
	w.waitConverged(30*time.Second, a, b)
	slow.delay.Store(int64(late))
	// Two renewals at this pace: the survivor keeps what it holds while nothing happens.
	renewals(t, 2, nil, leasesOf(b)...)
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
	testutil.Eventually(t, 4*ttl, func() bool { return w.heldBy(w.ctrls, b) }, "pod-b to take %v over", mine)
	// Two renewals of every lease after the take-over: a lapse shows by then.
	renewals(t, 2, nil, leasesOf(b)...)
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
