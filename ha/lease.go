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
// one has stopped publishing. The times are monotonic: a process paused (SIGSTOP, a long GC)
// finds its lease invalid the moment it runs again, before it can publish or save a position.
//
// A lease that ran out is not ended at once: for lease_ttl more its controller keeps running,
// fenced (Valid and Held are false: nothing is published or saved), while renewals go on. A
// renewal is a write at the revision this replica last wrote, so one that succeeds proves that no
// other replica took the key meanwhile: the lease is valid again and the controller goes on
// where it was, instead of starting from scratch (a full listing, its bucket read back) on a
// replica or a NATS that was only slow. Otherwise the lease ends (the coordinator drops it).
type Lease struct {
	controller string
	key        string
	id         string        // this acquisition, written in the record
	since      time.Time     // wall clock of the acquisition
	token      uint64        // bucket revision of the acquiring write
	kick       func()        // wakes the coordinator when the lease runs out or ends by itself
	grace      time.Duration // after the deadline, until the lease ends unless renewed

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	deadline time.Time // monotonic
	timer    *time.Timer

	// renewing is held across a renewal (the renewer's goroutine) and by whoever reads rev
	// to delete the key, so that the delete is at the revision last written.
	renewing sync.Mutex
	rev      uint64       // revision of the last write
	lost     atomic.Bool  // another replica took the key: let go without deleting it
	ranOut   atomic.Bool  // the deadline passed; a renewal clears it
	lapses   atomic.Int64 // times it ran out, not yet counted by the coordinator
}

// leaseGrant is what a lease is made of: the controller and its key, this replica's id, when it
// was acquired, the revision of the write that holds it, and when it runs out unless renewed.
type leaseGrant struct {
	controller, key, id string
	since               time.Time
	rev                 uint64
	deadline            time.Time
}

// newLease starts the lease g grants; grace is how long it is let run past its deadline with
// no renewal answered, kick wakes the coordinator when it runs out.
func newLease(g leaseGrant, grace time.Duration, kick func()) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lease{controller: g.controller, key: g.key, id: g.id, since: g.since, token: g.rev, rev: g.rev,
		kick: kick, grace: grace, ctx: ctx, cancel: cancel, deadline: g.deadline}
	deadline := g.deadline
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

// Context is cancelled when the lease ends: lost, handed over, released, or run out with no
// renewal answered for lease_ttl more. Run the controller's work under it; what it publishes
// or saves checks Held first.
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

// extend moves the deadline to until, never backwards (renewals are sent one after another);
// a lease that ran out is valid again.
func (l *Lease) extend(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.deadline) {
		l.deadline = until
	}
	if time.Now().Before(l.deadline) {
		l.ranOut.Store(false)
	}
}

// ranOutAt is the deadline that passed (zero while it is ahead): the lease ran out then.
func (l *Lease) ranOutAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.deadline) {
		return time.Time{}
	}
	return l.deadline
}

// expire runs when the timer fires: unless a renewal moved the deadline, the lease ran out and
// the coordinator is woken (to count it); grace later, unless renewed meanwhile, the lease ends
// by its own clock, also in a replica whose coordinator is stuck.
func (l *Lease) expire() {
	l.mu.Lock()
	left := time.Until(l.deadline)
	if l.ctx.Err() == nil {
		switch {
		case left > 0:
			l.timer.Reset(left)
		case left > -l.grace:
			l.timer.Reset(left + l.grace)
		}
	}
	l.mu.Unlock()
	if left <= 0 && !l.ranOut.Swap(true) {
		l.lapses.Add(1)
	}
	if left <= -l.grace {
		l.cancel()
	}
	if left <= 0 {
		l.kick()
	}
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
