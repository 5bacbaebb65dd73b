package guest

// One visit of a VM by a guest-checker worker: which checks are due, how failures are classified
// and counted, and how the results are recorded. The calls themselves are guestCommands'
// (commands.go).

import (
	"context"
	"errors"
	"time"

	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/veil"
)

// checkPlan is what one visit of a VM does, decided from its schedule.
type checkPlan struct {
	ping, os, fs, time, net, stats bool
	offered                        map[string]bool // nil: ask available-guest-cmds first
	agentDown                      bool            // the agent missed its last ping
}

// checkResult is what one visit learned; finish records it.
type checkResult struct {
	offered                   map[string]bool
	failed                    bool // the agent did not answer (ping or command list)
	unsupported               bool // the platform refuses guest commands for this VM
	stopped                   bool // the platform says the VM or its agent is not running
	gen                       uint64
	pinged, pingOK            bool
	pingDur                   float64
	reconnect                 bool
	os                        *veil.GuestOSInfo
	fsDone, timeDone, netDone bool
	fs                        []guestFS
	nics                      []guestNIC
	ipv6                      string
	clock                     float64
	statsDone                 bool // the statistics were due: disks, cpu and load replace the VM's
	disks                     []guestDisk
	cpu                       *guestCPU
	load                      *guestLoad
}

// check runs the checks of one VM that are due, then puts it back in the queue. Checks of one
// VM run one after another: a guest agent answers one command at a time anyway. A call waits
// for the client's request budget as long as it takes (only ctx ends the wait): a short
// budget delays checks, it never fails them.
func (g *Checker) check(ctx context.Context, v *guestVM) {
	now := time.Now()
	p, r, ok := g.plan(v, now)
	down := p.agentDown
	if !ok { // left the inventory while waiting for a worker
		return
	}
	if r.offered == nil {
		offered, err := g.cmds.available(ctx, v.id)
		if ctx.Err() != nil {
			g.requeue(v)
			return
		}
		if err != nil {
			// Without the list nothing may be sent; the visit counts as a failed ping.
			r.failed = true
			r.classify(err)
			g.finish(v, now, p, r)
			return
		}
		r.offered = offered
	}
	if p.ping && r.offered[guestCmdPing] {
		dur, err := g.cmds.ping(ctx, v.id)
		if ctx.Err() != nil {
			g.requeue(v)
			return
		}
		r.pinged, r.pingOK, r.pingDur = true, err == nil, dur
		if err != nil {
			r.failed = true
			r.classify(err)
			g.finish(v, now, p, r)
			return
		}
		if down {
			g.cmds.reconnected(ctx, v.id, &p, &r)
		}
	} else if down {
		// The agent missed its last ping: nothing else until a ping succeeds.
		p.os, p.fs, p.time, p.net, p.stats = false, false, false, false, false
	}
	g.cmds.readDue(ctx, v.id, p, &r)
	if ctx.Err() != nil {
		g.requeue(v)
		return
	}
	g.finish(v, now, p, r)
}

// plan says what is due at v's visit now, and whether its agent missed its last ping; ok is
// false for a VM that left the inventory while waiting for a worker.
func (g *Checker) plan(v *guestVM, now time.Time) (p checkPlan, r checkResult, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v.gone {
		return p, r, false
	}
	due := func(t time.Time) bool { return !t.IsZero() && !t.After(now) }
	p = checkPlan{
		ping:      !v.nextPing.After(now),
		os:        due(v.nextOS),
		fs:        due(v.nextFS),
		time:      due(v.nextTime),
		net:       due(v.nextNet),
		stats:     due(v.nextStats),
		offered:   v.cmds,
		agentDown: v.agentDown,
	}
	// The snapshot that made the VM eligible: a refusal as not running holds until a newer one.
	return p, checkResult{offered: p.offered, gen: g.syncedGen}, true
}

// classify tells, from a failed ping or command list, refusals about the VM itself from an
// agent that does not answer.
func (r *checkResult) classify(err error) {
	switch {
	case errors.Is(err, veil.ErrGuestUnsupported):
		r.unsupported = true
	case errors.Is(err, veil.ErrAgentNotRunning):
		r.stopped = true
	}
}

// finish records a visit under the lock, reschedules the VM and, when the visit was its ping,
// counts it in the current sweep.
func (g *Checker) finish(v *guestVM, now time.Time, p checkPlan, r checkResult) {
	defer g.cache.Invalidate()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case v.gone:
	case r.stopped:
		g.drop(v, r.gen, now)
		return
	case r.unsupported:
		g.markUnsupported(v, now)
		return
	}
	if r.offered != nil {
		v.cmds = r.offered
	}
	if r.pingOK && v.unsupported {
		v.unsupported = false
		level.Debug(g.logger).Log("msg", "guest commands accepted again", "domain_id", v.id)
	}
	switch {
	case r.failed:
		// Stale measurements would lie about a guest we cannot reach.
		v.pinged, v.pingOK, v.pingDur, v.agentDown = true, false, r.pingDur, true
		v.forget()
	default:
		if r.pinged {
			v.pinged, v.pingOK, v.pingDur, v.agentDown = true, r.pingOK, r.pingDur, false
		}
		if r.reconnect {
			v.forget()
		}
		if r.os != nil {
			v.os = r.os
		}
		if r.fsDone {
			v.fs = r.fs
		}
		if r.timeDone {
			v.clock, v.hasClock = r.clock, true
		}
		if r.netDone {
			v.nics, v.ipv6 = r.nics, r.ipv6
		}
		if r.statsDone {
			v.disks, v.cpu, v.load = r.disks, r.cpu, r.load
		}
	}
	g.sched.reschedule(v, now, p)
	if p.ping && !v.gone {
		g.leaveSweep(v.id, time.Now())
	}
}

// drop removes a VM the platform says is not running, or has no agent running, although the
// inventory snapshot of generation gen said otherwise: the snapshot is stale, pinging on would
// only count errors. It comes back with the next snapshot that says it runs.
func (g *Checker) drop(v *guestVM, gen uint64, now time.Time) {
	if g.vms[v.id] == v {
		delete(g.vms, v.id)
	}
	v.gone = true
	g.stopped[v.id] = gen
	g.leaveSweep(v.id, now)
	level.Debug(g.logger).Log("msg", "guest checks paused until the inventory says the VM runs", "domain_id", v.id)
}

// markUnsupported takes a VM the platform refuses guest commands for out of the checks and the
// coverage. Its error was counted once, by the call that found it; until osinfo_interval has
// passed nothing more is sent, then one probe (command list and ping) tells whether it still
// holds.
func (g *Checker) markUnsupported(v *guestVM, now time.Time) {
	if !v.unsupported {
		level.Debug(g.logger).Log("msg", "platform refuses guest commands for this VM; checks paused", "domain_id", v.id, "retry_after", g.cfg.OSInfoInterval)
	}
	v.unsupported = true
	v.pinged, v.pingOK, v.pingDur, v.agentDown = false, false, 0, true
	v.forget()
	v.cmds = nil // ask the list again with the probe
	g.leaveSweep(v.id, now)
	g.sched.probeLater(v, now)
}

// countError counts a failed call; api_error (the controller, not the guest, failed) makes the
// sweep unsuccessful.
func (g *Checker) countError(id, cmd, reason string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.vms[id]; v != nil && v.unsupported && reason == "not_supported" {
		return // counted when the VM was marked; the probe only confirms it
	}
	last := g.errs.add(id, cmd, reason)
	g.sweep.failedCall(last, guestControllerFailure(reason, err))
	level.Debug(g.logger).Log("msg", "guest command failed", "domain_id", id, "command", cmd, "reason", reason, "err", err)
}
