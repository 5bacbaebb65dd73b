package guest

// Full ping sweeps of the guest checker (a sweep starts with the VMs eligible at that moment and
// ends when each has had its ping or has left), and what the checker reports of them: the run
// status the daemon turns into veil_collector_*{collector="guest"}, and the status page's view.

import (
	"fmt"
	"time"

	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

// guestSweep follows full ping sweeps.
type guestSweep struct {
	start    time.Time
	pending  map[string]struct{}
	apiErrs  int    // controller-side failures during this sweep
	apiErr   string // the last of them: why the sweep fails (a refusal about one VM does not)
	failErr  string // why the last finished sweep failed
	running  bool
	done     bool // at least one sweep finished
	dur      time.Duration
	end      time.Time
	ok       bool
	okEnd    time.Time
	errCount int // command errors during this sweep, for the log line
}

func (g *Checker) startSweep(now time.Time) {
	g.sweep.start = now
	g.sweep.apiErrs, g.sweep.errCount, g.sweep.apiErr = 0, 0, ""
	g.sweep.pending = make(map[string]struct{}, len(g.vms))
	for id, v := range g.vms {
		if !v.unsupported {
			g.sweep.pending[id] = struct{}{}
		}
	}
	// Without a VM to ping there is no sweep; sync starts one when a VM comes.
	g.sweep.running = len(g.sweep.pending) > 0
}

// leaveSweep marks a VM as done for the current sweep and ends the sweep when it was the last.
func (g *Checker) leaveSweep(id string, now time.Time) {
	if !g.sweep.running {
		return
	}
	if _, ok := g.sweep.pending[id]; !ok {
		return
	}
	delete(g.sweep.pending, id)
	if len(g.sweep.pending) > 0 {
		return
	}
	s := &g.sweep
	if !s.done {
		// The first full sweep: every guest has its series now, shown without the pause
		// after the last render (a minute at 50,000 VMs).
		g.cache.Now()
	}
	s.running, s.done = false, true
	s.dur, s.end = now.Sub(s.start), now
	s.ok, s.failErr = s.apiErrs == 0, s.apiErr
	if s.ok {
		s.okEnd = now
	}
	// Sweeps failing is logged once when it starts and once when a sweep succeeds again.
	switch {
	case s.apiErrs > 0:
		if !g.outage.Fail(now, level.Warn, "guest sweep failed: the controller failed guest commands (said again when a sweep succeeds)", nil,
			"errors", s.errCount, "api_errors", s.apiErrs, "duration", s.dur, "last_error", s.apiErr) {
			level.Debug(g.logger).Log("msg", "guest sweep failed again", "errors", s.errCount, "api_errors", s.apiErrs, "duration", s.dur, "last_error", s.apiErr)
		}
	case g.outage.Recover(now, "guest sweep succeeded again", "errors", s.errCount, "duration", s.dur):
	case s.errCount > 0:
		level.Debug(g.logger).Log("msg", "guest sweep finished with failed guest commands", "errors", s.errCount, "duration", s.dur)
	}
	g.startSweep(now)
}

// RunStatus reports the guest checker as the collector "guest": a run is a full ping sweep.
// Until the first sweep ends, the sweep under way says whether the controller answers; a sweep
// fails when the controller (not a guest) failed during it.
func (g *Checker) RunStatus() []runstatus.Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sweep
	st := runstatus.Status{Collector: "guest", Success: g.sweepOK(), LastSuccess: s.okEnd, Error: s.apiErr}
	if s.done {
		st.Duration, st.Error = s.dur, s.failErr
	}
	return []runstatus.Status{st}
}

// sweepOK is veil_collector_success{collector="guest"}: the last full sweep met no failure of
// the controller, or, until the first ends, the sweep under way. Called with g.mu held.
func (g *Checker) sweepOK() bool {
	if g.sweep.done {
		return g.sweep.ok
	}
	return g.sweep.apiErrs == 0
}

// lastSweepEnd is when the last full sweep ended (zero before the first): Status without the
// coverage count, which walks every VM under the checker's lock.
func (g *Checker) lastSweepEnd() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.sweep.done {
		return time.Time{}
	}
	return g.sweep.end
}

// Status reports guest-check coverage and the last sweep.
func (g *Checker) Status() Status {
	inv := g.snapshot()
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, unsupported := g.coverage(inv)
	st := Status{Eligible: len(eligible), Unsupported: unsupported, LastError: g.lastEr}
	if g.lastErID != "" {
		name := g.lastErID
		for i := range inv.doms {
			if inv.doms[i].ID == g.lastErID && inv.doms[i].VerboseName != "" {
				name = inv.doms[i].VerboseName
				break
			}
		}
		st.LastErrorDomain, st.LastErrorDomainID, st.LastErrorCommand, st.LastErrorReason = name, g.lastErID, g.lastErCmd, g.lastErReason
		st.LastIsState = g.lastErReason == "agent_not_running" || g.lastErReason == "not_supported"
		st.LastError = fmt.Sprintf("%s on %s (%s): %s", g.lastErCmd, name, g.lastErID, g.lastErReason)
	}
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
