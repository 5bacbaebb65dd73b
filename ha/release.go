// This file holds how held leases end: release (OnRelease first, then the key deleted for the
// next owner), and the stop of a replica.

package ha

import (
	"context"
	"sync"
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go/jetstream"
)

// drop ends held leases: all invalid at once, then OnRelease of each; what it returns is
// waited for on a goroutine per lease, off the loop, and then (when del) the lease's key is
// deleted at this replica's revision so that the next owner can take it without waiting. The
// controller is not acquired again before that (the table's releasing).
func (lp *loop) drop(ctx context.Context, leases []*Lease, why string, del bool) {
	c := lp.c
	for _, l := range leases {
		l.end()
	}
	for _, l := range leases {
		c.mu.Lock()
		mine := c.leases[l.controller] == l
		if mine {
			delete(c.leases, l.controller)
			c.table.letGo(l.controller)
		}
		c.mu.Unlock()
		if !mine {
			continue
		}
		c.obs.transition(l.controller)
		stopped := c.opts.OnRelease(l.controller)
		lp.releases.Add(1)
		go func() {
			defer lp.releases.Done()
			if stopped != nil {
				stopped()
			}
			level.Info(c.logger).Log("msg", "controller released", "controller", l.controller, "why", why)
			if del {
				cctx, cancel := c.callCtx(ctx)
				if err := lp.kv.Delete(cctx, l.key, jetstream.LastRevision(l.lastRev())); err != nil && !isCASFailure(err) {
					level.Debug(c.logger).Log("msg", "couldn't delete lease; it expires instead", "controller", l.controller, "err", err)
				}
				cancel()
			}
			c.mu.Lock()
			c.table.released(l.controller)
			c.mu.Unlock()
			c.kick()
		}()
	}
}

// stop ends every lease; with release it also deletes them and this replica's record at once.
func (lp *loop) stop(release bool) {
	c := lp.c
	leases := c.heldLeases()
	lp.drop(context.Background(), leases, "shutting down", false)
	lp.releases.Wait() // every controller stopped, also those released before
	if !release {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.table.tick, time.Second))
	defer cancel()
	// The controllers are stopped: this replica's record and its leases go at once.
	var wg sync.WaitGroup
	wg.Add(1 + len(leases))
	go func() {
		defer wg.Done()
		_ = lp.kv.Delete(ctx, instancePrefix+c.opts.Instance)
	}()
	for _, l := range leases {
		go func() {
			defer wg.Done()
			_ = lp.kv.Delete(ctx, l.key, jetstream.LastRevision(l.lastRev()))
		}()
	}
	wg.Wait()
}
