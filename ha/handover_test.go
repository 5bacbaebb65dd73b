// Tests of the hand-over record: whatever two replicas' views say, the bucket lets only one
// hand a controller over at a time, and the next one starts as soon as the last is taken.

package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// handOverBucket starts a NATS server with a bucket of its own for the hand-over record, and
// returns it with a maker of coordinators' loops (not running) on it, of the controllers alpha and bravo.
func handOverBucket(t *testing.T) (context.Context, jetstream.KeyValue, func(name string) *loop) {
	url := testutil.StartNATS(t).URL()
	js := testutil.JetStream(t, url)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "HANDOVER_TEST", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	def := config.Default().HA // the bucket and replicas a configuration without an ha section gets
	return ctx, kv, func(name string) *loop {
		c, err := New(nc, Options{Bucket: def.Bucket, Replicas: def.Replicas, Instance: name, LeaseTTL: testTTL, Controllers: []string{"alpha", "bravo"}})
		if err != nil {
			t.Fatal(err)
		}
		return newLoop(c, kv)
	}
}

// TestOnlyOneHandOverAtATime gives two replicas views that both make them the mover (the race
// seen on CI: two controllers released within 5 ms) and checks that only the first may release
// until the controller it handed over is held by someone.
func TestOnlyOneHandOverAtATime(t *testing.T) {
	ctx, kv, coord := handOverBucket(t)
	a, b, recv := coord("pod-a"), coord("pod-b"), coord("pod-c")

	if !a.claimHandOver(ctx, nil, "alpha", "pod-c") {
		t.Fatal("the first hand-over was refused")
	}
	// b's view has not seen a's record: it tries as if no hand-over were in flight.
	if b.claimHandOver(ctx, nil, "bravo", "pod-c") {
		t.Fatal("a second hand-over was allowed while the first was in flight")
	}
	b.c.mu.Lock()
	r, _ := b.c.table.view.handOver(time.Now(), b.c.table.ttl)
	b.c.mu.Unlock()
	if r == nil || r.Controller != "alpha" || r.From != "pod-a" {
		t.Fatalf("after its refusal b's view shows hand-over %+v, want alpha from pod-a", r)
	}

	// The receiver has not taken alpha yet: it leaves the record alone.
	g, err := kv.Get(ctx, handOverKey)
	if err != nil {
		t.Fatal(err)
	}
	recv.c.table.view.apply(handOverKey, g.Revision(), g.Operation(), g.Value(), time.Now())
	recv.endHandOver(ctx)
	if _, err := kv.Get(ctx, handOverKey); err != nil {
		t.Fatalf("record gone before alpha was taken: %v", err)
	}
	// Once it holds alpha, it ends the hand-over, and the next one may start.
	recv.c.table.took("alpha", tenure{})
	recv.endHandOver(ctx)
	e, err := kv.Get(ctx, handOverKey)
	if err == nil && e.Operation() == jetstream.KeyValuePut {
		t.Fatal("record still there after the receiver took alpha")
	}
	// b's view (no watch here) still shows a's record: its first try is refused and reads the
	// key again, the second goes through.
	b.c.mu.Lock()
	_, stale := b.c.table.view.handOver(time.Now(), b.c.table.ttl)
	b.c.mu.Unlock()
	if b.claimHandOver(ctx, stale, "bravo", "pod-c") {
		t.Fatal("a claim over a revision that is gone went through")
	}
	b.c.mu.Lock()
	r, e2 := b.c.table.view.handOver(time.Now(), b.c.table.ttl)
	b.c.mu.Unlock()
	if r != nil {
		t.Fatalf("b's view still shows hand-over %+v after reading the key again", r)
	}
	if !b.claimHandOver(ctx, e2, "bravo", "pod-c") {
		t.Fatal("the next hand-over was refused after the first ended")
	}
}

// TestTheReceiverEndsAHandOverItsViewIsBehindOn: the receiver holds the controller handed
// over, but its view has an older revision of the record (the watch had not delivered the
// latest): its delete is refused, and it reads the record again so that its next look ends the
// hand-over, without waiting for another change of the bucket (none may come before a renew
// period: every replica waits for this one).
func TestTheReceiverEndsAHandOverItsViewIsBehindOn(t *testing.T) {
	ctx, kv, coord := handOverBucket(t)
	sender, recv := coord("pod-a"), coord("pod-c")
	if !sender.claimHandOver(ctx, nil, "alpha", "pod-c") {
		t.Fatal("the hand-over was refused")
	}
	old, err := kv.Get(ctx, handOverKey)
	if err != nil {
		t.Fatal(err)
	}
	// The receiver's view stops at this revision; the record is written once more after it.
	recv.c.table.view.apply(handOverKey, old.Revision(), old.Operation(), old.Value(), time.Now())
	if _, err := kv.Update(ctx, handOverKey, old.Value(), old.Revision()); err != nil {
		t.Fatal(err)
	}
	recv.c.table.took("alpha", tenure{})
	recv.endHandOver(ctx) // refused: its view is behind
	if e, err := kv.Get(ctx, handOverKey); err != nil || e.Operation() != jetstream.KeyValuePut {
		t.Fatalf("the record went with a delete at a revision it no longer had: %v", err)
	}
	recv.endHandOver(ctx) // its view read the record again: this one goes through
	if e, err := kv.Get(ctx, handOverKey); err == nil && e.Operation() == jetstream.KeyValuePut {
		t.Fatal("the record is still there: the receiver's view did not catch up on the refusal")
	}
	select {
	case <-recv.c.kickCh:
	default:
		t.Error("the refusal did not ask the loop for another look")
	}
}

// TestJoiningReplicasTakeTheirShareWithinARenewPeriod has one replica hold 30 controllers and
// two more join: the 20 hand-overs follow one another as soon as each controller is taken,
// still one at a time, not one per renew period of the holder. With lease_ttl 30 s (renew
// period 10 s) they are done within two renew periods (one, but for a stall below); paced by it they took
// 200 s, as 450 hand-overs took 15 minutes when ten replicas started on 500 controllers.
func TestJoiningReplicasTakeTheirShareWithinARenewPeriod(t *testing.T) {
	c := testutil.StartCluster(t)
	ctrls := make([]string, 30)
	for i := range ctrls {
		ctrls[i] = fmt.Sprintf("c%02d", i)
	}
	w := newWorld(t, c.URLs(), ctrls)
	const ttl = 30 * time.Second
	long := func(o *testOptions) { o.LeaseTTL = ttl }
	a := w.start("pod-a", long)
	testutil.Eventually(t, 20*time.Second, func() bool { return len(w.held(a)) == len(ctrls) }, "pod-a to hold all %d", len(ctrls))
	w.resetGaps()
	start := time.Now()
	b, d := w.start("pod-b", long), w.start("pod-c", long)
	// Within a renew period: each hand-over follows the watch's news of the one before (0.4-1.4
	// s for the 20 on a loaded machine). Paced by the renew period, they take 200 s; a receiver
	// that lost the record from its view (TestAReadFindingNothingForgetsNoNewerWrite) stalled
	// the chain until the record expired.
	w.waitConverged(ttl/3, a, b, d)
	w.mu.Lock()
	gap, unowned := w.maxGap, w.maxUnowned
	w.mu.Unlock()
	t.Logf("20 hand-overs in %v; longest gap %v, most controllers unowned at once %d", time.Since(start), gap, unowned)
	if unowned > 1 {
		t.Errorf("%d controllers were without an owner at once; they must move one at a time", unowned)
	}
}

// TestReplicasStartedTogetherTakeTheirShareDirectly starts three replicas one after another
// within a renew period, as a Deployment's pods come up: each takes its share of the free
// leases itself, nothing is handed over. A replica that acquired as soon as it had announced
// itself took all 30 while alone and handed 20 over; at 500 controllers the first of ten
// replicas started all 500 at once, its first renewals came too late and every lease lapsed.
func TestReplicasStartedTogetherTakeTheirShareDirectly(t *testing.T) {
	c := testutil.StartCluster(t)
	ctrls := make([]string, 30)
	for i := range ctrls {
		ctrls[i] = fmt.Sprintf("c%02d", i)
	}
	w := newWorld(t, c.URLs(), ctrls)
	const ttl = 15 * time.Second // a renew period of 5 s: the three start well within it
	// The bucket exists, as it does after the first start: three replicas creating it at once
	// on a busy machine may see the creation time out and try again a renew period later.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testutil.JetStream(t, c.URLs()).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: w.bucket, History: 1, Replicas: 3, TTL: 10 * ttl}); err != nil {
		t.Fatal(err)
	}
	long := func(o *testOptions) { o.LeaseTTL = ttl }
	a, b, d := w.start("pod-a", long), w.start("pod-b", long), w.start("pod-c", long)
	w.waitConverged(4*ttl, a, b, d)
	released := 0
	for _, r := range []*replica{a, b, d} {
		for _, n := range r.released {
			released += n
		}
	}
	if released > 0 {
		t.Errorf("%d controllers were handed over while the replicas started: the first up took more than its share", released)
	}
}

// TestRollingRestartTakesFreedLeasesAtOnce stops a replica (SIGTERM: its leases deleted)
// while another has just started, as a rolling restart does: every controller runs again well
// within the new replica's first renew period. A new replica that took no free lease in that
// period left those it should own free until a whole lease_ttl had passed: controllers of the
// fleet benchmark's rolling restart stopped for 34 s at lease_ttl 15 s.
func TestRollingRestartTakesFreedLeasesAtOnce(t *testing.T) {
	c := testutil.StartCluster(t)
	ctrls := make([]string, 30)
	for i := range ctrls {
		ctrls[i] = fmt.Sprintf("c%02d", i)
	}
	w := newWorld(t, c.URLs(), ctrls)
	const ttl = 30 * time.Second // a renew period of 10 s
	long := func(o *testOptions) { o.LeaseTTL = ttl }
	a, b := w.start("pod-a", long), w.start("pod-b", long)
	w.waitConverged(4*ttl, a, b)
	d := w.start("pod-c", long)
	testutil.Eventually(t, ttl/6, func() bool {
		for _, in := range a.c.Status().Instances {
			if in.ID == "pod-c" {
				return true
			}
		}
		return false
	}, "pod-a to see pod-c")
	stopped := time.Now()
	b.c.Close()
	testutil.Eventually(t, ttl/6, func() bool { return w.heldBy(w.ctrls, a, d) }, "every controller held by pod-a or pod-c")
	t.Logf("every controller held again %v after pod-b stopped; pod-c holds %d", time.Since(stopped), len(w.held(d)))
}

// staleReplicaKV is a replicated bucket one of whose replicas has not applied the latest delete
// of a key yet and answers reads: Create on a deleted key (an update at revision 0, refused,
// then a read of the key for the delete marker's revision) is refused as "key exists" once per
// marker, as when that read comes from the replica behind. Everything else is the real bucket.
type staleReplicaKV struct {
	jetstream.KeyValue
	mu       sync.Mutex
	answered map[string]bool // key@revision of a marker already read stale once
	refusals atomic.Int32
}

func (s *staleReplicaKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if hist, err := s.KeyValue.History(ctx, key); err == nil && len(hist) > 0 {
		last := hist[len(hist)-1]
		id := fmt.Sprintf("%s@%d", key, last.Revision())
		s.mu.Lock()
		stale := last.Operation() != jetstream.KeyValuePut && !s.answered[id]
		s.answered[id] = true
		s.mu.Unlock()
		if stale {
			s.refusals.Add(1)
			return 0, fmt.Errorf("%w: the read was answered by a replica behind the delete", jetstream.ErrKeyExists)
		}
	}
	return s.KeyValue.Create(ctx, key, value, opts...)
}

// TestAStaleReadOfADeletedKeyDoesNotStallTheChain: a bucket replica that has not applied a
// delete yet answers the read inside Create, which then says "key exists" of a lease just
// handed over (or of the hand-over record just ended). Nothing in the bucket changes after
// such a refusal, so a replica that waits for a change looks again only at its next renew
// period: the chain of hand-overs stopped for 10 s at lease_ttl 30 s. Writes over a delete
// marker go at its revision and read nothing: the joining replica takes its share within half
// of its first renew period, before any tick of its own could help.
func TestAStaleReadOfADeletedKeyDoesNotStallTheChain(t *testing.T) {
	const ttl = 30 * time.Second // renew period 10 s
	w := newWorld(t, testutil.StartNATS(t).URL(), names("ctl", 4))
	var stale []*staleReplicaKV
	opt := func(o *testOptions) {
		o.Replicas, o.LeaseTTL = 1, ttl
		s := &staleReplicaKV{answered: map[string]bool{}}
		stale = append(stale, s)
		o.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { s.KeyValue = kv; return s }
	}
	a := w.start("pod-a", opt)
	// Alone, pod-a takes the free leases once its first renew period is over.
	testutil.Eventually(t, ttl, func() bool { return len(w.held(a)) == len(w.ctrls) }, "pod-a to hold all %d", len(w.ctrls))
	b := w.start("pod-b", opt)
	// Half of pod-b's first renew period: its first tick cannot help.
	w.waitConverged(ttl/6, a, b)
	n := int32(0)
	for _, s := range stale {
		n += s.refusals.Load()
	}
	t.Logf("pod-b holds %v; Create refused by a stale read %d times", w.held(b), n)
}

// TestAHandOverGoesToTheReplicaTheRecordNames: the mover chose pod-b from a view that had not
// seen pod-c yet, and pod-c's view makes pod-c the controller's owner. pod-c leaves it to pod-b,
// which takes it and ends the hand-over; before, pod-c took it and pod-b's share came a renew
// period later. The mover is played by writing its records into the bucket.
func TestAHandOverGoesToTheReplicaTheRecordNames(t *testing.T) {
	const ttl = 30 * time.Second
	ct := ""
	for i := 0; ct == ""; i++ {
		name := fmt.Sprintf("ctl%d", i)
		if assign(everyone([]string{"pod-a", "pod-b", "pod-c"}, []string{name}), nil)[name] == "pod-c" {
			ct = name
		}
	}
	w := newWorld(t, testutil.StartNATS(t).URL(), []string{ct})
	ctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	kv, err := testutil.JetStream(t, w.urls).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: w.bucket, History: 1, TTL: 10 * ttl})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v any) uint64 {
		b, _ := json.Marshal(v)
		rev, err := kv.Put(ctx, key, b)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	announceA := func() {
		put(instancePrefix+"pod-a", instanceRecord{Instance: "pod-a", Nonce: "a", Started: time.Now(), Renewed: time.Now(), Controllers: []string{ct}})
	}
	announceA()
	leaseRev := put(leaseKey(ct), leaseRecord{Instance: "pod-a", Controller: ct, ID: "a1", Since: time.Now(), Renewed: time.Now(), TTL: ttl.String()})
	long := func(o *testOptions) { o.Replicas, o.LeaseTTL = 1, ttl }
	b, d := w.start("pod-b", long), w.start("pod-c", long)
	for _, r := range []*replica{b, d} {
		testutil.Eventually(t, ttl/3, func() bool { return len(r.c.Status().Instances) == 3 }, "%s to see three replicas", r.name)
	}
	announceA()
	// pod-a hands ct over to pod-b: the record first, then the lease's delete.
	put(handOverKey, handOverRecord{Controller: ct, From: "pod-a", To: "pod-b", At: time.Now()})
	if err := kv.Delete(ctx, leaseKey(ct), jetstream.LastRevision(leaseRev)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ttl/3, func() bool { return b.c.Lease(ct) != nil }, "pod-b, named by the hand-over record, to take %s", ct)
	if n := gauge(t, d.c, "veil_ha_lease_transitions_total", ct); n != 0 {
		t.Errorf("pod-c acquired or gave up %s %v times; the hand-over named pod-b", ct, n)
	}
	testutil.Eventually(t, ttl/3, func() bool {
		e, err := kv.Get(ctx, handOverKey)
		return errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && e.Operation() != jetstream.KeyValuePut
	}, "pod-b to end the hand-over, so that the next one may start")
}
