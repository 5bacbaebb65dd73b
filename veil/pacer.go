package veil

import (
	"context"
	"time"
)

// pacer lets requests go at most one per interval, measured between the moments they are
// really let go. A token bucket reserves future permits for every waiter, so waiters that wake
// late (a stalled process, a busy core) all go at once and exceed the rate the controller was
// promised; the pacer lets one waiter at a time sleep and stamps the time it woke.
type pacer struct {
	turn     chan struct{} // a lock that a context can give up on
	interval time.Duration
	last     time.Time
}

func newPacer(perSecond float64) *pacer {
	return &pacer{turn: make(chan struct{}, 1), interval: time.Duration(float64(time.Second) / perSecond)}
}

// wait blocks until the next request may go. It fails at once with errRateWait when that moment
// lies past ctx's deadline, and with ctx's error when ctx ends first.
func (p *pacer) wait(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.turn }()
	if d := time.Until(p.last.Add(p.interval)); d > 0 {
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
			return errRateWait
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	p.last = time.Now()
	return nil
}
