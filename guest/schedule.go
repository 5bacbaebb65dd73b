package guest

// When the guest checker visits each VM: following the inventory (which VMs are eligible, by
// snapshot generation), each VM's phase inside every interval, the time-ordered queue and the
// dispatcher that hands due VMs to the workers.

import (
	"container/heap"
	"context"
	"hash/fnv"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// guestInventory is one inventory snapshot as the checker uses it: the inventory's generation
// of its domains, and the VMs guest checks apply to, computed once per generation so that
// neither the sync loop nor a scrape walks 10,000 VMs for nothing.
type guestInventory struct {
	doms     []*veil.Domain      // the snapshot itself, never modified
	gen      uint64              // 0 before the first read
	eligible map[string]struct{} // never modified once built
}

// DomainSource is what the checker follows: the inventory's latest domains and their
// generation, which grows whenever the domains are read again (*Inventory implements it).
type DomainSource interface {
	DomainsGen() ([]*veil.Domain, uint64)
}

// snapshot returns the source's latest snapshot, recomputing eligibility only when its
// generation changed.
func (g *Checker) snapshot() guestInventory {
	doms, gen := g.domains.DomainsGen()
	g.invMu.Lock()
	defer g.invMu.Unlock()
	if gen != g.inv.gen {
		g.inv = guestInventory{doms: doms, gen: gen, eligible: guestEligible(doms)}
	}
	return g.inv
}

// guestEligible returns the ids of the VMs guest checks apply to: running, not templates, with
// a connected agent.
func guestEligible(domains []*veil.Domain) map[string]struct{} {
	out := make(map[string]struct{}, len(domains))
	for i := range domains {
		d := domains[i]
		if int(d.UserPowerState) == veil.PowerOn && !d.Template && d.GuestUtils.QemuState && d.ID != "" {
			out[d.ID] = struct{}{}
		}
	}
	return out
}

// syncLoop follows the inventory: VMs that become eligible are queued at their phase, VMs that
// stop being eligible are dropped. It reads the snapshot's generation every syncEvery (a few
// field reads) and does the work only when it changed.
func (g *Checker) syncLoop(ctx context.Context) {
	t := time.NewTicker(g.syncEvery)
	defer t.Stop()
	for {
		g.sync(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Checker) sync(now time.Time) {
	inv := g.snapshot()
	g.mu.Lock()
	defer g.mu.Unlock()
	if inv.gen == g.syncedGen {
		if !g.sweep.running {
			g.startSweep(now) // a VM accepted again after all were refused
		}
		return
	}
	g.syncedGen = inv.gen
	g.changed() // eligibility follows the snapshot
	for id, gen := range g.stopped {
		if gen != inv.gen {
			delete(g.stopped, id) // a newer snapshot decides
		}
	}
	changed := false
	for id, v := range g.vms {
		if _, ok := inv.eligible[id]; ok {
			continue
		}
		delete(g.vms, id)
		v.gone = true
		if v.index >= 0 {
			heap.Remove(&g.queue, v.index)
		}
		g.leaveSweep(id, now)
	}
	for id := range inv.eligible {
		if _, ok := g.vms[id]; ok {
			continue
		}
		if _, ok := g.stopped[id]; ok {
			continue
		}
		v := g.newVM(id, now)
		g.vms[id] = v
		heap.Push(&g.queue, v)
		changed = true
	}
	if !g.sweep.running {
		g.startSweep(now)
	}
	if changed {
		g.signal()
	}
}

// newVM is a VM that became eligible at now, each check at its next slot.
func (g *Checker) newVM(id string, now time.Time) *guestVM {
	v := &guestVM{id: id, phase: guestPhase(id), slow: guestPhase(id + "\x00slow"), index: -1}
	v.nextPing = guestNextSlot(now, g.pingInterval, v.phase)
	v.nextOS = v.nextPing // on connect
	if g.cfg.FSInfoInterval > 0 {
		v.nextFS = guestNextSlot(now, g.cfg.FSInfoInterval, v.slow)
	}
	if g.cfg.TimeInterval > 0 {
		v.nextTime = guestNextSlot(now, g.cfg.TimeInterval, v.slow)
	}
	v.nextNet = guestNextSlot(now, g.cfg.NetworkInterval, v.slow)
	if g.cfg.StatsInterval > 0 {
		v.nextStats = guestNextSlot(now, g.cfg.StatsInterval, v.slow)
	}
	return v
}

func (g *Checker) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// dispatch hands each VM to a worker when its earliest check is due. Sending blocks while all
// workers are busy: then checks run late, in order of due time, and the sweep stretches.
func (g *Checker) dispatch(ctx context.Context, work chan<- *guestVM) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		g.mu.Lock()
		var next *guestVM
		wait := time.Hour
		if len(g.queue) > 0 {
			head := g.queue[0]
			if w := time.Until(head.due()); w > 0 {
				wait = w
			} else {
				next = heap.Pop(&g.queue).(*guestVM)
			}
		}
		g.mu.Unlock()
		if next != nil {
			select {
			case work <- next:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// requeue puts a VM back without results (the checker is stopping), so a later Run goes on.
func (g *Checker) requeue(v *guestVM) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !v.gone {
		heap.Push(&g.queue, v)
	}
}

// reschedule moves every check that ran to its next slot and queues the VM again. Pings keep
// their phase exactly. The others go to their slot (at v.slow) about one interval after the slot
// that fell due, not after the visit: when the checker runs behind, a visit comes late by up to
// a sweep, and counting the interval from the visit pushed each VM's next read a little further
// back until most VMs' reads fell into every other sweep (sweeps alternating short and long
// instead of even).
func (g *Checker) reschedule(v *guestVM, now time.Time, p checkPlan) {
	if p.ping {
		v.nextPing = guestAdvance(v.nextPing, g.pingInterval, v.phase, now)
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
		v.nextOS = next(v.nextOS, g.cfg.OSInfoInterval)
	}
	if p.fs && g.cfg.FSInfoInterval > 0 {
		v.nextFS = next(v.nextFS, g.cfg.FSInfoInterval)
	}
	if p.time && g.cfg.TimeInterval > 0 {
		v.nextTime = next(v.nextTime, g.cfg.TimeInterval)
	}
	if p.net {
		v.nextNet = next(v.nextNet, g.cfg.NetworkInterval)
	}
	if p.stats && g.cfg.StatsInterval > 0 {
		v.nextStats = next(v.nextStats, g.cfg.StatsInterval)
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
	heap.Push(&g.queue, v)
	g.signal()
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
