// This file holds Lease: what the owner of a controller checks, without asking NATS, before
// it acts for the controller.

package ha

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is this replica's ownership of one controller. It is valid from its acquisition until
// lease_ttl minus a safety margin after the last renewal that was sent (not answered): another
// replica takes the controller over only lease_ttl after it saw that renewal, so by then this
// one has stopped. The times are monotonic: a process paused (SIGSTOP, a long GC) finds its
// lease invalid the moment it runs again, before it can publish or save a position.
type Lease struct {
	controller string
	key        string
	id         string    // this acquisition, written in the record
	since      time.Time // wall clock of the acquisition
	token      uint64    // bucket revision of the acquiring write
	kick       func()    // wakes the coordinator when the lease ends by itself

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	deadline time.Time // monotonic
	timer    *time.Timer

	// renewing is held across a renewal (the renewer's goroutine) and by whoever reads rev
	// to delete the key, so that the delete is at the revision last written.
	renewing sync.Mutex
	rev      uint64      // revision of the last write
	lost     atomic.Bool // another replica took the key: let go without deleting it
}

func newLease(controller, key, id string, since time.Time, rev uint64, deadline time.Time, kick func()) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lease{controller: controller, key: key, id: id, since: since, token: rev, rev: rev,
		kick: kick, ctx: ctx, cancel: cancel, deadline: deadline}
	l.mu.Lock() // expire reads timer
	l.timer = time.AfterFunc(time.Until(deadline), l.expire)
	l.mu.Unlock()
	return l
}

// Controller is the name of the controller the lease is for.
func (l *Lease) Controller() string { return l.controller }

// Token grows with every acquisition of this controller's lease by any replica (it is the
// bucket revision of the acquiring write): a fencing token for stores that can compare it.
func (l *Lease) Token() uint64 { return l.token }

// Context is cancelled as soon as the lease is no longer valid: lost, handed over or released.
// Run the controller's work under it.
func (l *Lease) Context() context.Context { return l.ctx }

// Valid says whether the lease still protects this replica's actions for the controller. Check
// it right before publishing and before saving a position; it asks nothing of NATS.
func (l *Lease) Valid() bool { return l.Remaining() > 0 }

// Held says whether no other replica can hold the controller yet: true until the deadline,
// also while this replica stops the controller after releasing it (its record is deleted for the
// next owner only once the wait OnRelease returned has returned), false once the lease expired or was taken. It is the
// fence of what a stopping owner still finishes: its last publish and the save of its position.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.deadline)
}

// Remaining is how long the lease stays valid without another renewal; 0 once it is not.
// Work that takes time (a publish awaiting its acknowledgement) fits if it is shorter.
func (l *Lease) Remaining() time.Duration {
	if l.ctx.Err() != nil {
		return 0
	}
	l.mu.Lock()
	d := time.Until(l.deadline)
	l.mu.Unlock()
	return max(d, 0)
}

// extend moves the deadline to until, never backwards (renewals are sent one after another).
func (l *Lease) extend(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.deadline) {
		l.deadline = until
	}
}

// expire runs when the timer fires: the lease ends unless a renewal moved the deadline.
func (l *Lease) expire() {
	l.mu.Lock()
	left := time.Until(l.deadline)
	if left > 0 && l.ctx.Err() == nil {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.cancel()
	l.kick()
}

// revoke ends the lease and its deadline: another replica holds the controller.
func (l *Lease) revoke() {
	l.lost.Store(true)
	l.mu.Lock()
	l.deadline = time.Now()
	l.mu.Unlock()
	l.end()
}

// lastRev is the revision of the last write of the lease, once no renewal is in flight.
func (l *Lease) lastRev() uint64 {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	return l.rev
}

// end makes the lease invalid at once.
func (l *Lease) end() {
	l.cancel()
	l.mu.Lock()
	l.timer.Stop()
	l.mu.Unlock()
}
