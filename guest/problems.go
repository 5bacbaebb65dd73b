package guest

// What the guest checks tell the status page and service discovery: the coverage and the last
// sweep, the guests that are not as they should be, and what the guests reported of themselves
// (operating system, IPv6 address).

import (
	"fmt"
	"math"

	"github.com/veil-exporter/veil-exporter/inventory"
)

// ClockOffsetThreshold is the clock offset past which a guest's clock counts as a problem: the
// alert VeilGuestClockOffset's threshold.
const ClockOffsetThreshold = 1.0 // seconds

// Status reports guest-check coverage and the last sweep.
func (g *Checker) Status() Status {
	inv := g.domains.latest()
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, unsupported := g.coverage(inv)
	st := Status{Eligible: len(eligible), Unsupported: unsupported}
	g.errs.status(&st, inv)
	for _, id := range eligible {
		if v, ok := g.vms[id]; ok && v.pinged {
			st.Checked++
		}
	}
	if g.sweep.done {
		st.SweepDuration, st.LastSweep = g.sweep.dur, g.sweep.end
	}
	return st
}

// coverage returns the VMs of the snapshot that guest checks apply to, without those the
// platform refused as not running on this snapshot, and the number it refuses commands for,
// which it leaves out too. g.mu must be held.
func (g *Checker) coverage(inv guestInventory) ([]string, int) {
	eligible := make([]string, 0, len(inv.eligible))
	unsupported := 0
	for id := range inv.eligible {
		if gen, ok := g.stopped[id]; ok && gen == inv.gen {
			continue
		}
		if v := g.vms[id]; v != nil && v.unsupported {
			unsupported++
			continue
		}
		eligible = append(eligible, id)
	}
	return eligible, unsupported
}

// Problems lists the checked guests that do not answer guest-ping and those whose clock is off
// by more than ClockOffsetThreshold, by name. While the controller fails guest commands (the
// collector "guest" failing) every ping fails at once and says nothing of the guests: they are
// not listed then, as the alert VeilGuestAgentNotAnswering holds back; the status page shows the
// controller's error instead.
func (g *Checker) Problems() []inventory.Problem {
	inv := g.domains.latest()
	names := make(map[string]string, len(inv.doms))
	for i := range inv.doms {
		names[inv.doms[i].ID] = inv.doms[i].VerboseName
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, _ := g.coverage(inv)
	controllerOK := g.sweep.succeeds()
	var out []inventory.Problem
	for _, id := range eligible {
		v, ok := g.vms[id]
		if !ok || !v.pinged {
			continue
		}
		switch {
		case !v.pingOK && controllerOK:
			out = append(out, inventory.Problem{Kind: "guest", ID: id, Name: inventory.NameOr(names[id], id), State: "not answering guest-ping", Failure: true})
		case v.hasClock && math.Abs(v.clock) > ClockOffsetThreshold:
			out = append(out, inventory.Problem{Kind: "clock", ID: id, Name: inventory.NameOr(names[id], id), State: fmt.Sprintf("clock off by %+.1fs", v.clock), Failure: true})
		}
	}
	inventory.SortProblems(out)
	return out
}

// OSIDs returns the os_id guest-get-osinfo answered for each VM the checker holds one for (the
// checker forgets it when the agent stops answering or reconnects). The map is the caller's.
func (g *Checker) OSIDs() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string, len(g.vms))
	for id, v := range g.vms {
		if v.os != nil && v.os.ID != "" && !v.unsupported && !v.gone {
			out[id] = v.os.ID
		}
	}
	return out
}

// GuestIPv6 returns the IPv6 address guest-network-get-interfaces last reported for each VM the
// checker holds one for (ScrapableIP, never link-local). The map is the caller's.
func (g *Checker) GuestIPv6() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string)
	for id, v := range g.vms {
		if v.ipv6 != "" && !v.unsupported && !v.gone {
			out[id] = v.ipv6
		}
	}
	return out
}
