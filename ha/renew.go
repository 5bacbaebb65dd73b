// This file holds the renewer: what keeps this replica's record and its held leases alive,
// renewals at the revision last written, on a goroutine of its own.

package ha

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// renewer announces c's replica and renews its leases in kv.
type renewer struct {
	c  *Coordinator
	kv jetstream.KeyValue
}

// keepAlive is the renewer's loop: every renew period it announces this replica and renews
// every held lease, on a goroutine of its own, so that nothing the coordinator's loop waits for
// (acquisitions, hand-overs, releases: calls to a bucket that may answer slowly on a busy
// machine) ever delays a renewal. A lease stays valid for lease_ttl - lease_ttl/5 after its
// renewal was sent; renewals go every lease_ttl/3, so one renewal may fail or answer as late
// as the call timeout and the lease still holds. After a renewal failed it tries again soon,
// not a whole period later. It returns when stop is closed or ctx is done.
func (rn *renewer) keepAlive(ctx context.Context, stop <-chan struct{}) {
	c := rn.c
	tick := c.table.tick
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		if c.hooks.beforeTick != nil {
			// A test's paused replica: its loop waits too (see loop.run).
			c.gate.Lock()
			c.hooks.beforeTick()
			c.gate.Unlock()
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); rn.heartbeat(ctx) }()
		failed, held := rn.renew(ctx)
		wg.Wait()
		if !failed {
			c.obs.renewedInTime(time.Now(), held, c.table.ttl)
		}
		next := tick - time.Since(start)
		if failed {
			next = min(next, tick/4)
		}
		t.Reset(max(next, 0))
	}
}

// heartbeat announces this replica and its controllers.
func (rn *renewer) heartbeat(ctx context.Context) {
	c := rn.c
	c.mu.Lock()
	rec := instanceRecord{Instance: c.opts.Instance, Nonce: c.nonce, Started: c.started, Renewed: time.Now(), Controllers: c.table.controllers}
	c.table.announced.pending = false
	c.mu.Unlock()
	b, _ := json.Marshal(rec)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	key := instancePrefix + c.opts.Instance
	rev, err := rn.kv.Put(cctx, key, b)
	if err != nil {
		c.mu.Lock()
		c.table.announced.pending = true
		c.mu.Unlock()
		c.obs.fail("couldn't announce this replica", err)
		return
	}
	now := time.Now()
	c.mu.Lock()
	c.table.heard(rev, now)
	c.table.view.apply(key, rev, jetstream.KeyValuePut, b, now)
	c.mu.Unlock()
	c.obs.reachable(now)
}

// renew extends every held lease at once; a lease whose key moved on is revoked and the loop
// kicked to let it go. It reports whether a renewal failed with the lease still valid, and
// whether any lease was held.
func (rn *renewer) renew(ctx context.Context) (failed, held bool) {
	leases := rn.c.heldLeases()
	lost := make([]bool, len(leases))
	ok := make([]bool, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		if l.ctx.Err() != nil {
			ok[i] = true
			continue // ended: reconcile lets it go
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lost[i], ok[i] = rn.renewOne(ctx, l)
		}()
	}
	wg.Wait()
	kick := false
	for i, l := range leases {
		if lost[i] {
			l.revoke()
			kick = true
		} else if !ok[i] && l.ctx.Err() == nil { // also one that ran out: a renewal may regain it
			failed = true
		}
	}
	if kick {
		rn.c.kick() // reconcile drops it without deleting the key: another replica holds it
	}
	return failed, len(leases) > 0
}

// renewOne writes the lease at the revision this replica last wrote: lost means another
// replica took it, ok that it was renewed (or has ended here, so there is nothing to renew).
func (rn *renewer) renewOne(ctx context.Context, l *Lease) (lost, ok bool) {
	c, kv := rn.c, rn.kv
	l.renewing.Lock()
	defer l.renewing.Unlock()
	if l.ctx.Err() != nil {
		return false, true // let go meanwhile: its key is deleted at l.rev
	}
	b := c.table.leaseValue(l.controller, tenure{l.id, l.since}, time.Now())
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := time.Now()
	rev, err := kv.Update(cctx, l.key, b, l.rev)
	if isCASFailure(err) {
		// A renewal applied with its reply lost leaves l.rev behind: the key still holds this
		// acquisition's id, and its revision is ours to write over.
		e, gerr := kv.Get(cctx, l.key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
			return true, false
		case gerr != nil:
			c.obs.fail("couldn't renew lease", gerr)
			return false, false
		}
		var r leaseRecord
		if json.Unmarshal(e.Value(), &r) != nil || r.ID != l.id || r.Instance != c.opts.Instance {
			return true, false
		}
		sent = time.Now()
		rev, err = kv.Update(cctx, l.key, b, e.Revision())
		if isCASFailure(err) {
			return true, false
		}
	}
	if err != nil {
		c.obs.fail("couldn't renew lease of "+l.controller, err)
		return false, false
	}
	l.rev = rev
	l.extend(sent.Add(c.table.ttl - c.table.margin))
	c.mu.Lock()
	c.table.view.apply(l.key, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return false, true
}

// isCASFailure says whether err is the server refusing a compare-and-set.
func isCASFailure(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
