package guest

// The inventory as the guest checker follows it: its latest snapshot and, once per generation,
// the VMs guest checks apply to (snapshots), and the sync loop that queues the VMs that become
// eligible and drops those that stop being.

import (
	"context"
	"sync"
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

// snapshots follows a DomainSource for the checker: its latest snapshot, with the VMs guest
// checks apply to computed once per generation. It has its own lock, never held while taking
// another.
type snapshots struct {
	src DomainSource
	mu  sync.Mutex
	inv guestInventory // the source's snapshot as last read; only latest replaces it
}

// latest returns the source's latest snapshot, recomputing eligibility only when its
// generation changed.
func (s *snapshots) latest() guestInventory {
	doms, gen := s.src.DomainsGen()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.inv.gen {
		s.inv = guestInventory{doms: doms, gen: gen, eligible: guestEligible(doms)}
	}
	return s.inv
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
// stop being eligible are dropped. It reads the snapshot's generation every guestSyncEvery (a
// few field reads) and does the work only when it changed.
func (g *Checker) syncLoop(ctx context.Context) {
	t := time.NewTicker(guestSyncEvery(g.cfg.PingInterval))
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

// sync brings the checker's VMs up to the inventory's latest snapshot at now.
func (g *Checker) sync(now time.Time) {
	inv := g.domains.latest()
	g.mu.Lock()
	defer g.mu.Unlock()
	if inv.gen == g.syncedGen {
		if !g.sweep.running {
			g.sweep.begin(now, g.vms) // a VM accepted again after all were refused
		}
		return
	}
	g.syncedGen = inv.gen
	g.cache.Invalidate() // eligibility follows the snapshot
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
		g.sched.remove(v)
		g.leaveSweep(id, now)
	}
	for id := range inv.eligible {
		if _, ok := g.vms[id]; ok {
			continue
		}
		if _, ok := g.stopped[id]; ok {
			continue
		}
		v := g.sched.newVM(id, now)
		g.vms[id] = v
		g.sched.add(v)
		changed = true
	}
	if !g.sweep.running {
		g.sweep.begin(now, g.vms)
	}
	if changed {
		g.sched.signal()
	}
}

// guestSyncEvery is how often the checker reads the inventory's generation: a quarter of the
// ping interval, between 20 ms and a second.
func guestSyncEvery(ping time.Duration) time.Duration {
	return min(max(ping/4, 20*time.Millisecond), time.Second)
}
