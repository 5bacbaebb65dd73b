// This file holds one round of coordination: let go of ended leases, acquire what this replica
// should run, and hand over at most one controller (the hand-over record).

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

// reconcile lets go of ended leases, acquires what this replica should own and hands over one
// controller that another replica should own.
func (c *Coordinator) reconcile(ctx context.Context, kv jetstream.KeyValue) {
	var expired, lost, ranOut []*Lease
	now := time.Now()
	for _, l := range c.heldLeases() {
		if l.lapses.Load() > 0 {
			ranOut = append(ranOut, l) // also one a renewal regained meanwhile
		}
		// One that ran out is fenced until a renewal regains it, or its own clock ends it.
		at := l.ranOutAt()
		switch {
		case l.lost.Load():
			lost = append(lost, l)
		case !at.IsZero() && (now.Sub(at) >= c.ttl || l.ctx.Err() != nil):
			expired = append(expired, l)
		}
	}
	c.drop(ctx, kv, lost, "lost: another replica took it", false)
	c.drop(ctx, kv, expired, "expired: not renewed in time", true)
	c.lapsed(ranOut)
	c.mu.Lock()
	announce := c.announce
	c.mu.Unlock()
	if announce {
		c.heartbeat(ctx, kv)
	}
	now = time.Now()
	r := c.plan(now)
	// A lease of a stopped or paused holder runs out with no write to wake us: look again at
	// that instant rather than at the next renew period, up to lease_ttl/3 later.
	c.wakeAt(r.next)
	c.act(ctx, kv, r)
}

// round is what one reconcile decided from the view of the bucket.
type round struct {
	acquire  []acquisition
	adopt    []*Lease // acquisitions whose reply was lost
	removed  []*Lease // held, no longer configured
	handOver *Lease
	desired  map[string]string // controller -> the instance that should own it
	marker   *entry            // the hand-over record as read
	next     time.Time         // the next lease expiry in the view
}

// acquisition is a free lease to take, as read.
type acquisition struct {
	controller string
	e          *entry
}

// plan decides a round under c.mu: which leases to adopt, acquire and drop, and the one
// controller to hand over.
func (c *Coordinator) plan(now time.Time) round {
	self := c.opts.Instance
	c.mu.Lock()
	defer c.mu.Unlock()
	live := c.view.liveInstances(now, c.ttl)
	live[self] = &instanceRecord{Instance: self, Controllers: c.controllers}
	eligible := make(map[string][]string, len(live))
	for id, r := range live {
		eligible[id] = r.Controllers
	}
	var r round
	held, since := c.holders(live, now)
	r.desired = assignSince(eligible, held, since)
	var inFlight *handOverRecord
	inFlight, r.marker = c.view.handOver(now, c.ttl)
	// The controller being handed over goes to the replica the record names while it is live,
	// whatever our view says of who should have it: the mover's view and ours may differ (a
	// replica it had not seen yet), and a third replica taking it leaves the receiver short.
	if inFlight != nil && live[inFlight.To] != nil && r.desired[inFlight.Controller] != "" {
		r.desired[inFlight.Controller] = inFlight.To
	}
	// For a renew period after it announced itself a replica does not take a lease that was
	// free before it came: replicas started together (a Deployment's pods) have announced
	// themselves by then, and each takes its share directly, rather than the first up taking
	// every free lease alone and starting every controller at once (its first renewals then
	// came too late) only to hand most of them over. A lease freed since (let go by a replica
	// stopped in a rolling restart, run out) is taken at once, and so is one handed to us.
	warming := now.Sub(c.joined) < c.tick
	mine := map[string]bool{}
	anyFree := false
	for _, ct := range c.controllers {
		mine[ct] = true
		handed := inFlight != nil && inFlight.Controller == ct && inFlight.To == self
		if c.held[ct] == nil && !c.releasing[ct] && c.planFree(&r, ct, now, warming && !handed) {
			anyFree = true
		}
	}
	for ct, l := range c.held {
		if !mine[ct] {
			r.removed = append(r.removed, l)
		}
	}
	if inFlight == nil && !anyFree && len(r.acquire) == 0 && len(r.adopt) == 0 {
		if ct := c.mover(r.desired, live, now); ct != "" {
			r.handOver = c.held[ct]
		}
	}
	r.next = c.view.nextExpiry(now, c.ttl)
	return r
}

// planFree plans a configured controller this replica does not hold: adopt it when our
// acquisition's reply was lost, acquire it when its lease is free and it should be ours (when
// warming, only if it became free after this replica joined), or has been free for a whole
// lease. It reports whether the lease is free; c.mu held.
func (c *Coordinator) planFree(r *round, ct string, now time.Time, warming bool) bool {
	key := leaseKey(ct)
	st := c.view.lease(key, now, c.ttl)
	if a, ok := c.attempts[key]; ok {
		// An acquisition whose reply was lost shows up in the bucket: it is ours since it was sent.
		if !st.free && st.e.lease.ID == a.id && a.sent.Add(c.ttl-c.margin).After(now) {
			l := newLease(leaseGrant{ct, key, a.id, st.e.lease.Since, st.e.rev, a.sent.Add(c.ttl - c.margin)}, c.ttl, c.kick)
			r.adopt = append(r.adopt, l)
			delete(c.attempts, key)
			return false
		}
		if !st.free && st.e.lease.ID != a.id || now.Sub(a.sent) > c.ttl {
			delete(c.attempts, key)
		}
	}
	if !st.free {
		return false
	}
	may := !warming || st.freeSince.After(c.joined)
	if may && r.desired[ct] == c.opts.Instance || now.Sub(st.freeSince) >= c.ttl {
		r.acquire = append(r.acquire, acquisition{ct, st.e})
	}
	return true
}

// act carries a round out: drops, adoptions, acquisitions (concurrently), then the hand-over.
func (c *Coordinator) act(ctx context.Context, kv jetstream.KeyValue, r round) {
	c.drop(ctx, kv, r.removed, "removed from the configuration", true)
	for _, l := range r.adopt {
		c.took(l)
	}
	got := make([]*Lease, len(r.acquire))
	var wg sync.WaitGroup
	for i, a := range r.acquire {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = c.acquire(ctx, kv, a.controller, a.e) }()
	}
	wg.Wait()
	for _, l := range got {
		if l != nil {
			c.took(l)
		}
	}
	c.endHandOver(ctx, kv)
	if r.handOver != nil {
		to := r.desired[r.handOver.controller]
		if c.claimHandOver(ctx, kv, r.marker, r.handOver.controller, to) {
			c.drop(ctx, kv, []*Lease{r.handOver}, "handed over to "+to, true)
		}
	}
}

// holders maps each controller some live instance announces to the live instance holding its
// lease, as far as this replica knows, and to when that holder acquired it (its record's
// since, Unix nanoseconds); c.mu held. assign lets them keep it, longest held first, so that
// when a replica leaves only its controllers move.
func (c *Coordinator) holders(live map[string]*instanceRecord, now time.Time) (map[string]string, map[string]int64) {
	out, since := map[string]string{}, map[string]int64{}
	for _, r := range live {
		for _, ct := range r.Controllers {
			if l := c.held[ct]; l != nil {
				out[ct], since[ct] = c.opts.Instance, l.since.UnixNano()
			} else if st := c.view.lease(leaseKey(ct), now, c.ttl); !st.free && live[st.holder] != nil {
				out[ct], since[ct] = st.holder, st.e.lease.Since.UnixNano()
			}
		}
	}
	return out, since
}

// wakeAt arms the kick of the loop for instant t (none when t is zero); Run's goroutine only.
func (c *Coordinator) wakeAt(t time.Time) {
	switch {
	case t.IsZero():
		if c.wake != nil {
			c.wake.Stop()
		}
	case c.wake == nil:
		c.wake = time.AfterFunc(time.Until(t), c.kick)
	default:
		c.wake.Reset(time.Until(t))
	}
}

// claimHandOver writes the hand-over record, which only one replica at a time can do: the
// views of two replicas may differ for a moment, the bucket's revision check does not. marker
// is the record's entry as seen (a stale one is replaced over its revision).
func (c *Coordinator) claimHandOver(ctx context.Context, kv jetstream.KeyValue, marker *entry, controller, to string) bool {
	b, _ := json.Marshal(handOverRecord{Controller: controller, From: c.opts.Instance, To: to, At: time.Now().UTC()})
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	rev, err := writeOver(cctx, kv, handOverKey, b, marker)
	if isCASFailure(err) {
		// Another replica is handing over, or the view was behind: read the key for the next look.
		c.rereadHandOver(cctx, kv)
		return false
	}
	if err != nil {
		c.setErr("couldn't start handing over "+controller, err)
		return false
	}
	c.mu.Lock()
	c.view.apply(handOverKey, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return true
}

// endHandOver deletes the hand-over record once the controller it names is held here: the
// next one may move.
func (c *Coordinator) endHandOver(ctx context.Context, kv jetstream.KeyValue) {
	c.mu.Lock()
	r, e := c.view.handOver(time.Now(), c.ttl)
	done := r != nil && c.held[r.Controller] != nil
	c.mu.Unlock()
	if !done {
		return
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	err := kv.Delete(cctx, handOverKey, jetstream.LastRevision(e.rev))
	switch {
	case isCASFailure(err):
		// The view was behind: read the record again and look once more, rather than leave the
		// next hand-over waiting for a change of the bucket that may not come before a renew
		// period.
		c.rereadHandOver(cctx, kv)
		c.kick()
	case err != nil:
		level.Debug(c.logger).Log("msg", "couldn't delete the hand-over record; it expires instead", "controller", r.Controller, "err", err)
	}
}

// rereadHandOver reads the hand-over record into the view after a write over its revision was
// refused: the view was behind.
func (c *Coordinator) rereadHandOver(ctx context.Context, kv jetstream.KeyValue) {
	c.mu.Lock()
	known := c.view.rev(handOverKey)
	c.mu.Unlock()
	g, err := kv.Get(ctx, handOverKey)
	c.mu.Lock()
	learnt := false
	switch {
	case err == nil:
		learnt = c.view.apply(handOverKey, g.Revision(), g.Operation(), g.Value(), time.Now())
	case errors.Is(err, jetstream.ErrKeyNotFound):
		learnt = c.view.forget(handOverKey, known) // deleted, or gone by the bucket's max age
	}
	c.mu.Unlock()
	if learnt {
		c.kick() // the next look may hand over or take what the refusal held back
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

// mover picks the one controller to hand over now: among those held by a live replica that is
// not their desired owner, the first by holder and name. Every replica computes the same, so
// controllers move one at a time. It returns the controller when it is this replica's to move.
func (c *Coordinator) mover(desired map[string]string, live map[string]*instanceRecord, now time.Time) string {
	var bestHolder, best string
	for ct, want := range desired {
		holder := ""
		if c.held[ct] != nil {
			holder = c.opts.Instance
		} else if st := c.view.lease(leaseKey(ct), now, c.ttl); !st.free {
			holder = st.holder
		}
		if holder == "" {
			// A controller without an owner (one just handed over, not yet taken): hand over
			// nothing else until it has one, or two would be unowned at once.
			return ""
		}
		if holder == want || live[holder] == nil {
			continue
		}
		if best == "" || holder < bestHolder || holder == bestHolder && ct < best {
			bestHolder, best = holder, ct
		}
	}
	if bestHolder != c.opts.Instance || c.held[best] == nil {
		return ""
	}
	return best
}

// acquire writes a lease for controller over the state e seen in the view; nil when another
// replica was faster or NATS did not answer.
func (c *Coordinator) acquire(ctx context.Context, kv jetstream.KeyValue, controller string, e *entry) *Lease {
	key := leaseKey(controller)
	id := uuid.NewString()
	since := time.Now()
	b := c.leaseValue(controller, id, since)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := time.Now()
	rev, err := writeOver(cctx, kv, key, b, e)
	if isCASFailure(err) {
		// The view was behind: read the key so that the next look is right, and look again
		// at once when the read taught the view something.
		c.mu.Lock()
		known := c.view.rev(key)
		c.mu.Unlock()
		g, gerr := kv.Get(cctx, key)
		c.mu.Lock()
		learnt := false
		switch {
		case gerr == nil:
			learnt = c.view.apply(key, g.Revision(), g.Operation(), g.Value(), time.Now())
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			learnt = c.view.forget(key, known) // deleted since, or gone by the bucket's max age
		}
		c.mu.Unlock()
		if learnt {
			c.kick()
		}
		return nil
	}
	if err != nil {
		c.mu.Lock()
		c.attempts[key] = attempt{id: id, sent: sent}
		c.mu.Unlock()
		c.setErr("couldn't acquire lease of "+controller, err)
		return nil
	}
	c.mu.Lock()
	c.view.apply(key, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return newLease(leaseGrant{controller, key, id, since, rev, sent.Add(c.ttl - c.margin)}, c.ttl, c.kick)
}

// took makes an acquired lease held and starts the controller.
func (c *Coordinator) took(l *Lease) {
	c.mu.Lock()
	c.held[l.controller] = l
	c.transitions[l.controller]++
	c.mu.Unlock()
	level.Info(c.logger).Log("msg", "controller acquired", "controller", l.controller, "token", l.token)
	c.opts.OnAcquire(l)
}
