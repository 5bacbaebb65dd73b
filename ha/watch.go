// This file holds the watch: it follows the bucket into the lease table's view, kicking the
// loop on every change, and is restarted when it falls behind.

package ha

import (
	"context"
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go/jetstream"
)

// watch follows kv for c; the loop starts, checks and ends it.
type watch struct {
	c         *Coordinator
	kv        jetstream.KeyValue
	end       func() // stops the running watch and waits for it
	dupWarned bool   // c.mu: another replica with our instance id was said
}

// start follows the bucket until end; it restarts the watch when it ends by itself.
func (w *watch) start(ctx context.Context) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			kw, err := w.kv.WatchAll(wctx)
			if err != nil {
				w.c.obs.fail("couldn't watch bucket "+w.c.opts.Bucket, err)
				t := time.NewTimer(w.c.table.tick)
				select {
				case <-wctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			w.follow(wctx, kw)
			_ = kw.Stop()
		}
	}()
	w.end = func() { cancel(); <-done }
}

func (w *watch) follow(ctx context.Context, kw jetstream.KeyWatcher) {
	c := w.c
	ownKey := instancePrefix + c.opts.Instance
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			now := time.Now()
			c.mu.Lock()
			v := &c.table.view
			if e == nil {
				if !v.synced {
					v.synced, v.syncedAt = true, now
				}
			} else {
				v.maxRev = max(v.maxRev, e.Revision())
				v.apply(e.Key(), e.Revision(), e.Operation(), e.Value(), now)
				if en := v.entries[e.Key()]; e.Key() == ownKey && en.inst != nil && en.inst.Nonce != c.nonce && !w.dupWarned {
					w.dupWarned = true
					level.Error(c.logger).Log("msg", "another replica uses the same instance id; give each replica its own ha.instance", "bucket", c.opts.Bucket)
				}
			}
			c.mu.Unlock()
			c.kick()
		}
	}
}

// check restarts a watch that did not deliver our own announcement of a period ago: the view
// would otherwise go stale silently.
func (w *watch) check(ctx context.Context) {
	w.c.mu.Lock()
	behind := w.c.table.watchBehind(time.Now())
	w.c.mu.Unlock()
	if behind {
		level.Warn(w.c.logger).Log("msg", "bucket watch fell behind; restarting it", "bucket", w.c.opts.Bucket)
		w.end()
		w.start(ctx)
	}
}
