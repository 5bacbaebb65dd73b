// This file holds the loop: the goroutine that talks to the bucket for the lease table. It
// runs the watch and the renewer, and in each round asks the table what to do and does it:
// let go of ended leases, acquire, adopt, hand over at most one controller (the hand-over
// record), and tells the table what came of it.

package ha

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// loop is one Run of c on the bucket kv.
type loop struct {
	c        *Coordinator
	kv       jetstream.KeyValue
	watch    *watch
	renewer  *renewer
	releases sync.WaitGroup // controllers being stopped (drop)
	wake     *time.Timer    // kicks the loop when the view's next record runs out
}

func newLoop(c *Coordinator, kv jetstream.KeyValue) *loop {
	return &loop{c: c, kv: kv, watch: &watch{c: c, kv: kv}, renewer: &renewer{c: c, kv: kv}}
}

// run follows the bucket, announces this replica and coordinates until ctx is done (leases let
// go here, left to expire in the bucket) or the coordinator is closed (deleted at once).
func (lp *loop) run(ctx context.Context) {
	c := lp.c
	lp.watch.start(ctx)
	defer func() { lp.watch.end() }()
	defer lp.wakeAt(time.Time{})
	for !c.synced() {
		select {
		case <-c.kickCh:
		case <-ctx.Done():
			return
		case <-c.life.closing:
			return
		}
	}
	// Announce before the first round, then renew and announce on a goroutine of its own. A
	// replica came when it sent its announcement, not when the answer was read: another may
	// see it, release a lease for it and have the delete reach our watch first, and that lease
	// was freed after we came.
	c.mu.Lock()
	c.table.joined = time.Now()
	c.mu.Unlock()
	lp.renewer.heartbeat(ctx)
	stopKeep := make(chan struct{})
	keeping := make(chan struct{})
	go func() { defer close(keeping); lp.renewer.keepAlive(ctx, stopKeep) }()
	endKeep := func() { close(stopKeep); <-keeping }
	ticker := time.NewTicker(c.table.tick)
	defer ticker.Stop()
	lp.onTick(ctx)
	for {
		select {
		case <-ctx.Done():
			endKeep()
			lp.stop(false)
			return
		case <-c.life.closing:
			endKeep()
			lp.stop(true)
			return
		case <-ticker.C:
			lp.onTick(ctx)
		case <-c.kickCh:
			c.gate.Lock()
			lp.reconcile(ctx)
			c.gate.Unlock()
		}
	}
}

// onTick is the loop's period: check the watch, then act. Announcing and renewing are the
// renewer's, never behind the loop's own calls to the bucket.
func (lp *loop) onTick(ctx context.Context) {
	lp.c.gate.Lock()
	defer lp.c.gate.Unlock()
	lp.watch.check(ctx)
	lp.reconcile(ctx)
}

// reconcile lets go of ended leases, acquires what this replica should own and hands over one
// controller that another replica should own.
func (lp *loop) reconcile(ctx context.Context) {
	c := lp.c
	taken, ranOutLong, ranOut := lp.ended(time.Now())
	lp.drop(ctx, taken, "lost: another replica took it", false)
	lp.drop(ctx, ranOutLong, "expired: not renewed in time", true)
	c.obs.lapsed(ranOut, c.table.ttl)
	c.mu.Lock()
	announce := c.table.announced.pending
	c.mu.Unlock()
	if announce {
		lp.renewer.heartbeat(ctx)
	}
	c.mu.Lock()
	r := c.table.plan(time.Now())
	c.mu.Unlock()
	// A lease of a stopped or paused holder runs out with no write to wake us: look again at
	// that instant rather than at the next renew period, up to lease_ttl/3 later.
	lp.wakeAt(r.next)
	lp.act(ctx, r)
}

// ended sorts the held leases that end now: lost (another replica took the key), expired (ran
// out lease_ttl ago, or ended by their own clock), and those that ran out since last counted.
func (lp *loop) ended(now time.Time) (taken, ranOutLong, ranOut []*Lease) {
	for _, l := range lp.c.heldLeases() {
		if l.lapses.Load() > 0 {
			ranOut = append(ranOut, l) // also one a renewal regained meanwhile
		}
		switch lp.c.table.ends(l.lost.Load(), l.ranOutAt(), l.ctx.Err() != nil, now) {
		case lost:
			taken = append(taken, l)
		case expired:
			ranOutLong = append(ranOutLong, l)
		}
	}
	return taken, ranOutLong, ranOut
}

// act carries a round out: drops, adoptions, acquisitions (concurrently), then the hand-over.
func (lp *loop) act(ctx context.Context, r round) {
	c := lp.c
	c.mu.Lock()
	removed := make([]*Lease, 0, len(r.removed))
	for _, ct := range r.removed {
		removed = append(removed, c.leases[ct])
	}
	handOver := c.leases[r.handOver]
	c.mu.Unlock()
	lp.drop(ctx, removed, "removed from the configuration", true)
	for _, g := range r.adopt {
		lp.took(newLease(g, c.table.ttl, c.kick))
	}
	got := make([]*Lease, len(r.acquire))
	var wg sync.WaitGroup
	for i, a := range r.acquire {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = lp.acquire(ctx, a) }()
	}
	wg.Wait()
	for _, l := range got {
		if l != nil {
			lp.took(l)
		}
	}
	lp.endHandOver(ctx)
	if handOver != nil {
		to := r.desired[r.handOver]
		if lp.claimHandOver(ctx, r.marker, r.handOver, to) {
			lp.drop(ctx, []*Lease{handOver}, "handed over to "+to, true)
		}
	}
}

// wakeAt arms the kick of the loop for instant t (none when t is zero).
func (lp *loop) wakeAt(t time.Time) {
	switch {
	case t.IsZero():
		if lp.wake != nil {
			lp.wake.Stop()
		}
	case lp.wake == nil:
		lp.wake = time.AfterFunc(time.Until(t), lp.c.kick)
	default:
		lp.wake.Reset(time.Until(t))
	}
}

// claimHandOver writes the hand-over record, which only one replica at a time can do: the
// views of two replicas may differ for a moment, the bucket's revision check does not. marker
// is the record's entry as seen (a stale one is replaced over its revision).
func (lp *loop) claimHandOver(ctx context.Context, marker *entry, controller, to string) bool {
	c := lp.c
	b, _ := json.Marshal(handOverRecord{Controller: controller, From: c.opts.Instance, To: to, At: time.Now().UTC()})
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	rev, err := writeOver(cctx, lp.kv, handOverKey, b, marker)
	if isCASFailure(err) {
		// Another replica is handing over, or the view was behind: read the key for the next look.
		lp.reread(cctx, handOverKey)
		return false
	}
	if err != nil {
		c.obs.fail("couldn't start handing over "+controller, err)
		return false
	}
	c.mu.Lock()
	c.table.view.apply(handOverKey, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return true
}

// endHandOver deletes the hand-over record once the controller it names is held here: the
// next one may move.
func (lp *loop) endHandOver(ctx context.Context) {
	c := lp.c
	c.mu.Lock()
	r, e := c.table.handOverDone(time.Now())
	c.mu.Unlock()
	if r == nil {
		return
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	err := lp.kv.Delete(cctx, handOverKey, jetstream.LastRevision(e.rev))
	switch {
	case isCASFailure(err):
		// The view was behind: read the record again and look once more, rather than leave the
		// next hand-over waiting for a change of the bucket that may not come before a renew
		// period.
		lp.reread(cctx, handOverKey)
		c.kick()
	case err != nil:
		level.Debug(c.logger).Log("msg", "couldn't delete the hand-over record; it expires instead", "controller", r.Controller, "err", err)
	}
}

// reread reads key into the view after a write over its revision was refused: the view was
// behind. When the read taught the view something, the loop looks again at once (the next look
// may hand over or take what the refusal held back).
func (lp *loop) reread(ctx context.Context, key string) {
	c := lp.c
	c.mu.Lock()
	known := c.table.view.rev(key)
	c.mu.Unlock()
	g, err := lp.kv.Get(ctx, key)
	c.mu.Lock()
	learnt := false
	switch {
	case err == nil:
		learnt = c.table.view.apply(key, g.Revision(), g.Operation(), g.Value(), time.Now())
	case errors.Is(err, jetstream.ErrKeyNotFound):
		learnt = c.table.view.forget(key, known) // deleted since, or gone by the bucket's max age
	}
	c.mu.Unlock()
	if learnt {
		c.kick()
	}
}

// writeOver writes key over its state e as last seen: an update at e's revision, also when e
// is a delete marker, and a create when the view has no revision of the key (or the marker
// seen is gone by the bucket's max age). Create on a deleted key reads the key to learn the
// marker's revision, and in a replicated bucket that read may be answered by a replica that
// has not applied the delete yet: "key exists" for a key that is free, and nothing in the
// bucket then changes to make anyone look again before the next renew period. An update at a
// known revision reads nothing.
func writeOver(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, e *entry) (uint64, error) {
	if e == nil {
		return kv.Create(ctx, key, value)
	}
	rev, err := kv.Update(ctx, key, value, e.rev)
	if e.deleted && isCASFailure(err) {
		return kv.Create(ctx, key, value)
	}
	return rev, err
}

// acquire writes a lease for a.controller over the state seen in the view; nil when another
// replica was faster or NATS did not answer.
func (lp *loop) acquire(ctx context.Context, a acquisition) *Lease {
	c := lp.c
	key := leaseKey(a.controller)
	h := tenure{id: uuid.NewString(), since: time.Now()}
	b := c.table.leaseValue(a.controller, h, time.Now())
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := time.Now()
	rev, err := writeOver(cctx, lp.kv, key, b, a.e)
	if isCASFailure(err) {
		// The view was behind: read the key so that the next look is right.
		lp.reread(cctx, key)
		return nil
	}
	if err != nil {
		c.mu.Lock()
		c.table.attempts[key] = attempt{id: h.id, sent: sent}
		c.mu.Unlock()
		c.obs.fail("couldn't acquire lease of "+a.controller, err)
		return nil
	}
	c.mu.Lock()
	c.table.view.apply(key, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return newLease(leaseGrant{a.controller, key, h.id, h.since, rev, sent.Add(c.table.ttl - c.table.margin)}, c.table.ttl, c.kick)
}

// took makes an acquired lease held and starts the controller.
func (lp *loop) took(l *Lease) {
	c := lp.c
	c.mu.Lock()
	c.leases[l.controller] = l
	c.table.took(l.controller, tenure{l.id, l.since})
	c.mu.Unlock()
	c.obs.transition(l.controller)
	level.Info(c.logger).Log("msg", "controller acquired", "controller", l.controller, "token", l.token)
	c.opts.OnAcquire(l)
}
