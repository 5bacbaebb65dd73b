// This file holds what keeps held leases alive and how they end: renewal at the revision last
// written, release (OnRelease first, then the key), and the stop of a replica.

package ha

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go/jetstream"
)

// keepAlive is the renewer: every renew period it announces this replica and renews every
// held lease, on a goroutine of its own, so that nothing the coordinator's loop waits for
// (acquisitions, hand-overs, releases: calls to a bucket that may answer slowly on a busy
// machine) ever delays a renewal. A lease stays valid for lease_ttl - lease_ttl/5 after its
// renewal was sent; renewals go every lease_ttl/3, so one renewal may fail or answer as late
// as the call timeout and the lease still holds. After a renewal failed it tries again soon,
// not a whole period later. It returns when stop is closed or ctx is done.
func (c *Coordinator) keepAlive(ctx context.Context, kv jetstream.KeyValue, stop <-chan struct{}) {
	t := time.NewTimer(c.tick)
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
		if c.beforeTick != nil {
			// A test's paused replica: its loop waits too (see Run).
			c.gate.Lock()
			c.beforeTick()
			c.gate.Unlock()
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); c.heartbeat(ctx, kv) }()
		failed := c.renew(ctx, kv)
		wg.Wait()
		if !failed {
			c.renewedInTime(time.Now())
		}
		next := c.tick - time.Since(start)
		if failed {
			next = min(next, c.tick/4)
		}
		t.Reset(max(next, 0))
	}
}

// renew extends every held lease at once; a lease whose key moved on is revoked and the loop
// kicked to let it go. It reports whether a renewal failed with the lease still valid.
func (c *Coordinator) renew(ctx context.Context, kv jetstream.KeyValue) (failed bool) {
	leases := c.heldLeases()
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
			lost[i], ok[i] = c.renewOne(ctx, kv, l)
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
		c.kick() // reconcile drops it without deleting the key: another replica holds it
	}
	return failed
}

// renewOne writes the lease at the revision this replica last wrote: lost means another
// replica took it, ok that it was renewed (or has ended here, so there is nothing to renew).
func (c *Coordinator) renewOne(ctx context.Context, kv jetstream.KeyValue, l *Lease) (lost, ok bool) {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	if l.ctx.Err() != nil {
		return false, true // let go meanwhile: its key is deleted at l.rev
	}
	b := c.leaseValue(l.controller, l.id, l.since)
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
			c.setErr("couldn't renew lease", gerr)
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
		c.setErr("couldn't renew lease of "+l.controller, err)
		return false, false
	}
	l.rev = rev
	l.extend(sent.Add(c.ttl - c.margin))
	c.mu.Lock()
	c.view.apply(l.key, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return false, true
}

func (c *Coordinator) leaseValue(controller, id string, since time.Time) []byte {
	b, _ := json.Marshal(leaseRecord{Instance: c.opts.Instance, Controller: controller, ID: id,
		Since: since, Renewed: time.Now(), TTL: c.ttl.String()})
	return b
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

// drop ends held leases: all invalid at once, then OnRelease of each; what it returns is
// waited for on a goroutine per lease, off the loop, and then (when del) the lease's key is
// deleted at this replica's revision so that the next owner can take it without waiting. The
// controller is not acquired again before that (releasing).
func (c *Coordinator) drop(ctx context.Context, kv jetstream.KeyValue, leases []*Lease, why string, del bool) {
	for _, l := range leases {
		l.end()
	}
	for _, l := range leases {
		c.mu.Lock()
		mine := c.held[l.controller] == l
		if mine {
			delete(c.held, l.controller)
			c.releasing[l.controller] = true
			c.transitions[l.controller]++
		}
		c.mu.Unlock()
		if !mine {
			continue
		}
		stopped := c.opts.OnRelease(l.controller)
		c.releases.Add(1)
		go func() {
			defer c.releases.Done()
			if stopped != nil {
				stopped()
			}
			level.Info(c.logger).Log("msg", "controller released", "controller", l.controller, "why", why)
			if del {
				cctx, cancel := c.callCtx(ctx)
				if err := kv.Delete(cctx, l.key, jetstream.LastRevision(l.lastRev())); err != nil && !isCASFailure(err) {
					level.Debug(c.logger).Log("msg", "couldn't delete lease; it expires instead", "controller", l.controller, "err", err)
				}
				cancel()
			}
			c.mu.Lock()
			delete(c.releasing, l.controller)
			c.mu.Unlock()
			c.kick()
		}()
	}
}

// stop ends every lease; with release it also deletes them and this replica's record at once.
func (c *Coordinator) stop(kv jetstream.KeyValue, release bool) {
	leases := c.heldLeases()
	c.drop(context.Background(), kv, leases, "shutting down", false)
	c.releases.Wait() // every controller stopped, also those released before
	if !release {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.tick, time.Second))
	defer cancel()
	// The controllers are stopped: this replica's record and its leases go at once.
	var wg sync.WaitGroup
	wg.Add(1 + len(leases))
	go func() {
		defer wg.Done()
		_ = kv.Delete(ctx, instancePrefix+c.opts.Instance)
	}()
	for _, l := range leases {
		go func() {
			defer wg.Done()
			_ = kv.Delete(ctx, l.key, jetstream.LastRevision(l.lastRev()))
		}()
	}
	wg.Wait()
}
