package guest

// When the guest checker visits each VM (schedule): each VM's phase inside every interval, its
// next slot for every check, and the time-ordered queue that the checker's dispatcher takes due
// VMs from. Guarded by Checker.mu, like the VMs it orders; wake is a channel.

import (
	"container/heap"
	"hash/fnv"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
)

// schedule orders the checker's VMs by their next check.
type schedule struct {
	cfg   config.Guest // the intervals
	queue guestQueue
	wake  chan struct{} // the queue changed; the dispatcher re-reads its head
}

func newSchedule(cfg config.Guest) schedule {
	return schedule{cfg: cfg, wake: make(chan struct{}, 1)}
}

// add queues v (sync adds many, then signals once).
func (s *schedule) add(v *guestVM) { heap.Push(&s.queue, v) }

// remove takes v out of the queue, if it is there (not with a worker).
func (s *schedule) remove(v *guestVM) {
	if v.index >= 0 {
		heap.Remove(&s.queue, v.index)
	}
}

// popDue takes the head of the queue when its earliest check is due; otherwise next is nil and
// wait is how long until it is (an hour on an empty queue).
func (s *schedule) popDue() (next *guestVM, wait time.Duration) {
	if len(s.queue) == 0 {
		return nil, time.Hour
	}
	if w := time.Until(s.queue[0].due()); w > 0 {
		return nil, w
	}
	return heap.Pop(&s.queue).(*guestVM), 0
}

// probeLater queues a VM the platform refuses guest commands for: nothing is due until
// osinfo_interval has passed, then its probe, the command list and the ping, at the ping's
// phase.
func (s *schedule) probeLater(v *guestVM, now time.Time) {
	v.nextFS, v.nextTime, v.nextNet, v.nextStats = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	v.nextPing = guestNextSlot(now.Add(s.cfg.OSInfoInterval), s.cfg.PingInterval, v.phase)
	v.nextOS = v.nextPing
	heap.Push(&s.queue, v)
	s.signal()
}

// newVM is a VM that became eligible at now, each check at its next slot.
func (s *schedule) newVM(id string, now time.Time) *guestVM {
	v := &guestVM{id: id, phase: guestPhase(id), slow: guestPhase(id + "\x00slow"), index: -1}
	v.nextPing = guestNextSlot(now, s.cfg.PingInterval, v.phase)
	v.nextOS = v.nextPing // on connect
	if s.cfg.FSInfoInterval > 0 {
		v.nextFS = guestNextSlot(now, s.cfg.FSInfoInterval, v.slow)
	}
	if s.cfg.TimeInterval > 0 {
		v.nextTime = guestNextSlot(now, s.cfg.TimeInterval, v.slow)
	}
	v.nextNet = guestNextSlot(now, s.cfg.NetworkInterval, v.slow)
	if s.cfg.StatsInterval > 0 {
		v.nextStats = guestNextSlot(now, s.cfg.StatsInterval, v.slow)
	}
	return v
}

// signal wakes the dispatcher: the queue changed.
func (s *schedule) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// reschedule moves every check that ran to its next slot and queues the VM again. Pings keep
// their phase exactly. The others go to their slot (at v.slow) about one interval after the slot
// that fell due, not after the visit: when the checker runs behind, a visit comes late by up to
// a sweep, and counting the interval from the visit pushed each VM's next read a little further
// back until most VMs' reads fell into every other sweep (sweeps alternating short and long
// instead of even).
func (s *schedule) reschedule(v *guestVM, now time.Time, p checkPlan) {
	if p.ping {
		v.nextPing = guestAdvance(v.nextPing, s.cfg.PingInterval, v.phase, now)
	}
	next := func(slot time.Time, interval time.Duration) time.Time {
		if slot.After(now) {
			return slot // run before its slot (an agent back): the slot stays
		}
		n := guestNextSlot(slot.Add(interval/2), interval, v.slow)
		if n.Before(now) { // more than an interval late: no second read to catch up
			n = guestNextSlot(now, interval, v.slow)
		}
		return n
	}
	switch {
	case v.agentDown || v.os == nil:
		v.nextOS = v.nextPing // with the next ping, until answered once per connection
	case p.os:
		v.nextOS = next(v.nextOS, s.cfg.OSInfoInterval)
	}
	if p.fs && s.cfg.FSInfoInterval > 0 {
		v.nextFS = next(v.nextFS, s.cfg.FSInfoInterval)
	}
	if p.time && s.cfg.TimeInterval > 0 {
		v.nextTime = next(v.nextTime, s.cfg.TimeInterval)
	}
	if p.net {
		v.nextNet = next(v.nextNet, s.cfg.NetworkInterval)
	}
	if p.stats && s.cfg.StatsInterval > 0 {
		v.nextStats = next(v.nextStats, s.cfg.StatsInterval)
	}
	if v.agentDown {
		// Nothing but the ping is sent to an agent that missed it; a check due before the ping
		// would bring the VM back to a worker at once, again and again, doing nothing.
		for _, t := range []*time.Time{&v.nextFS, &v.nextTime, &v.nextNet, &v.nextStats} {
			if !t.IsZero() && t.Before(v.nextPing) {
				*t = v.nextPing
			}
		}
	}
	if v.gone {
		return
	}
	heap.Push(&s.queue, v)
	s.signal()
}

func (v *guestVM) due() time.Time {
	d := v.nextPing
	for _, t := range [...]time.Time{v.nextOS, v.nextFS, v.nextTime, v.nextNet, v.nextStats} {
		if !t.IsZero() && t.Before(d) {
			d = t
		}
	}
	return d
}

// guestPhase places a VM inside every interval, evenly over many VMs and stable across restarts.
func guestPhase(id string) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// guestNextSlot is the first instant at or after t that sits at phase within interval.
func guestNextSlot(t time.Time, interval time.Duration, phase float64) time.Time {
	s := t.Truncate(interval).Add(time.Duration(phase * float64(interval)))
	if s.Before(t) {
		s = s.Add(interval)
	}
	return s
}

// guestAdvance is the slot after prev; when that is already past (the checker runs late), the
// next slot from now, so that a late VM does not run twice in a row to catch up.
func guestAdvance(prev time.Time, interval time.Duration, phase float64, now time.Time) time.Time {
	next := prev.Add(interval)
	if next.Before(now) {
		return guestNextSlot(now, interval, phase)
	}
	return next
}

// guestQueue orders VMs by their earliest due check.
type guestQueue []*guestVM

func (q guestQueue) Len() int           { return len(q) }
func (q guestQueue) Less(i, j int) bool { return q[i].due().Before(q[j].due()) }
func (q guestQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *guestQueue) Push(x any) {
	v := x.(*guestVM)
	v.index = len(*q)
	*q = append(*q, v)
}
func (q *guestQueue) Pop() any {
	old := *q
	v := old[len(old)-1]
	old[len(old)-1] = nil
	v.index = -1
	*q = old[:len(old)-1]
	return v
}
