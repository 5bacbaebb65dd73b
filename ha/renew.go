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

// renew extends every held lease; a lease whose key moved on is let go.
func (c *Coordinator) renew(ctx context.Context, kv jetstream.KeyValue) {
	leases := c.heldLeases()
	lost := make([]bool, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		if !l.Valid() {
			continue // reconcile lets it go; a renewal now could only come too late
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lost[i] = c.renewOne(ctx, kv, l)
		}()
	}
	wg.Wait()
	var gone []*Lease
	for i, l := range leases {
		if lost[i] {
			l.revoke()
			gone = append(gone, l)
		}
	}
	c.drop(ctx, kv, gone, "lost: another replica took it", false)
}

// renewOne writes the lease at the revision this replica last wrote; true means it is lost.
func (c *Coordinator) renewOne(ctx context.Context, kv jetstream.KeyValue, l *Lease) bool {
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
			return true
		case gerr != nil:
			c.setErr("couldn't renew lease", gerr)
			return false
		}
		var r leaseRecord
		if json.Unmarshal(e.Value(), &r) != nil || r.ID != l.id || r.Instance != c.opts.Instance {
			return true
		}
		sent = time.Now()
		rev, err = kv.Update(cctx, l.key, b, e.Revision())
		if isCASFailure(err) {
			return true
		}
	}
	if err != nil {
		c.setErr("couldn't renew lease of "+l.controller, err)
		return false
	}
	l.rev = rev
	l.extend(sent.Add(c.ttl - c.margin))
	c.mu.Lock()
	c.view.apply(l.key, rev, jetstream.KeyValuePut, b, time.Now())
	c.mu.Unlock()
	return false
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
				if err := kv.Delete(cctx, l.key, jetstream.LastRevision(l.rev)); err != nil && !isCASFailure(err) {
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
			_ = kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
		}()
	}
	wg.Wait()
}
