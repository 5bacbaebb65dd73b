package guest

// Full ping sweeps of the guest checker (guestSweep: a sweep starts with the VMs eligible at that
// moment and ends when each has had its ping or has left), and what the checker reports of them:
// the run status the daemon turns into veil_collector_*{collector="guest"}, the log lines said
// once per outage, and the status page's view. Guarded by Checker.mu, like the VMs it follows.

import (
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

// guestSweep follows full ping sweeps.
type guestSweep struct {
	logger   log.Logger
	outage   runstatus.Outage // of the sweeps: the controller failing guest commands
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

// begin starts a sweep at now over the VMs of vms the platform accepts guest commands for.
func (s *guestSweep) begin(now time.Time, vms map[string]*guestVM) {
	s.start = now
	s.apiErrs, s.errCount, s.apiErr = 0, 0, ""
	s.pending = make(map[string]struct{}, len(vms))
	for id, v := range vms {
		if !v.unsupported {
			s.pending[id] = struct{}{}
		}
	}
	// Without a VM to ping there is no sweep; sync starts one when a VM comes.
	s.running = len(s.pending) > 0
}

// leave marks a VM as done for the current sweep and ends the sweep when it was the last, then
// begins the next over vms; first says the sweep that ended was the first.
func (s *guestSweep) leave(id string, now time.Time, vms map[string]*guestVM) (first bool) {
	if !s.running {
		return false
	}
	if _, ok := s.pending[id]; !ok {
		return false
	}
	delete(s.pending, id)
	if len(s.pending) > 0 {
		return false
	}
	first = !s.done
	s.running, s.done = false, true
	s.dur, s.end = now.Sub(s.start), now
	s.ok, s.failErr = s.apiErrs == 0, s.apiErr
	if s.ok {
		s.okEnd = now
	}
	// Sweeps failing is logged once when it starts and once when a sweep succeeds again.
	switch {
	case s.apiErrs > 0:
		if !s.outage.Fail(now, level.Warn, "guest sweep failed: the controller failed guest commands (said again when a sweep succeeds)", nil,
			"errors", s.errCount, "api_errors", s.apiErrs, "duration", s.dur, "last_error", s.apiErr) {
			level.Debug(s.logger).Log("msg", "guest sweep failed again", "errors", s.errCount, "api_errors", s.apiErrs, "duration", s.dur, "last_error", s.apiErr)
		}
	case s.outage.Recover(now, "guest sweep succeeded again", "errors", s.errCount, "duration", s.dur):
	case s.errCount > 0:
		level.Debug(s.logger).Log("msg", "guest sweep finished with failed guest commands", "errors", s.errCount, "duration", s.dur)
	}
	s.begin(now, vms)
	return first
}

// failedCall counts a failed command (text says which) in the sweep under way; controller says
// the controller, not a guest, failed, which makes the sweep unsuccessful.
func (s *guestSweep) failedCall(text string, controller bool) {
	s.errCount++
	if controller {
		s.apiErrs++
		s.apiErr = text
	}
}

// succeeds is veil_collector_success{collector="guest"}: the last full sweep met no failure of
// the controller, or, until the first ends, the sweep under way.
func (s *guestSweep) succeeds() bool {
	if s.done {
		return s.ok
	}
	return s.apiErrs == 0
}

// runStatus is the checker's run status: a run is a full ping sweep. Until the first sweep
// ends, the sweep under way says whether the controller answers; a sweep fails when the
// controller (not a guest) failed during it.
func (s *guestSweep) runStatus() runstatus.Status {
	st := runstatus.Status{Collector: "guest", Success: s.succeeds(), LastSuccess: s.okEnd, Error: s.apiErr}
	if s.done {
		st.Duration, st.Error = s.dur, s.failErr
	}
	return st
}

// lastEnd is when the last full sweep ended (zero before the first).
func (s *guestSweep) lastEnd() time.Time {
	if !s.done {
		return time.Time{}
	}
	return s.end
}

// leaveSweep marks a VM as done for the current sweep (guestSweep.leave). After the first full
// sweep every guest has its series: they are rendered at once, without the pause after the last
// render (a minute at 50,000 VMs). Called with g.mu held.
func (g *Checker) leaveSweep(id string, now time.Time) {
	if g.sweep.leave(id, now, g.vms) {
		g.cache.Now()
	}
}

// RunStatus reports the guest checker as the collector "guest" (guestSweep.runStatus).
func (g *Checker) RunStatus() []runstatus.Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return []runstatus.Status{g.sweep.runStatus()}
}
