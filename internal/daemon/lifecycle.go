// The daemon's life (lifecycle): the context of the controllers that run without a lease, the
// controllers New built that wait for Run to start them, and Stop's signal and Run's end. Run's
// goroutine owns it, and New's before Run.

package daemon

import (
	"context"
	"sync"

	"github.com/go-kit/log"
)

// lifecycle is where the daemon is in its life: built, running, stopping, stopped.
type lifecycle struct {
	ctx    context.Context // of the controllers that run without a lease; cancelled by shutdown
	cancel context.CancelFunc
	// running is set when Run starts; until then (New) the controllers built wait in starting.
	running  bool
	starting []*controller

	stopOnce sync.Once
	stopc    chan struct{} // closed by Stop
	done     chan struct{} // closed when Run has stopped everything
}

func newLifecycle(parent context.Context) lifecycle {
	ctx, cancel := context.WithCancel(parent)
	return lifecycle{ctx: ctx, cancel: cancel, stopc: make(chan struct{}), done: make(chan struct{})}
}

// launch starts ct, or has begin start it when Run has not started yet.
func (l *lifecycle) launch(ct *controller, logger log.Logger) {
	if !l.running {
		l.starting = append(l.starting, ct)
		return
	}
	ct.start(l.ctx, logger)
}

// begin is Run's start: the controllers New built start now.
func (l *lifecycle) begin(logger log.Logger) {
	l.running = true
	for _, ct := range l.starting {
		ct.start(l.ctx, logger)
	}
	l.starting = nil
}

// stop asks Run to end and returns once it has stopped everything.
func (l *lifecycle) stop() {
	l.stopOnce.Do(func() { close(l.stopc) })
	<-l.done
}
