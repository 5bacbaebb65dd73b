package veil

import (
	"context"
	"time"
)

// pacer lets requests go one per interval. A token bucket reserves future permits for every
// waiter, so waiters that wake late (a stalled process, a busy core) all go at once and exceed
// the rate the controller was promised. The pacer lets one waiter at a time sleep until its slot
// on a fixed schedule (so timer overshoot does not accumulate and slow the rate down); when it
// has fallen more than one interval behind, the schedule restarts one interval after the last
// real release instead of catching up in a burst.
type pacer struct {
	turn     chan struct{} // a lock that a context can give up on
	interval time.Duration
	sched    time.Time // the slot of the last release
	actual   time.Time // when it really went

	// The clock: time.Now and a timer, or a test's virtual clock.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func newPacer(perSecond float64) *pacer {
	return &pacer{turn: make(chan struct{}, 1), interval: time.Duration(float64(time.Second) / perSecond),
		now: time.Now, sleep: sleepCtx}
}

// sleepCtx waits d, or until ctx ends (then its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	now := p.now()
	next := p.sched.Add(p.interval)
	if now.Sub(next) > p.interval {
		next = p.actual.Add(p.interval)
		if next.Before(now) {
			next = now
		}
	}
	if d := next.Sub(now); d > 0 {
		if dl, ok := ctx.Deadline(); ok && next.After(dl) {
			return errRateWait
		}
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
	}
	p.sched, p.actual = next, p.now()
	return nil
}
