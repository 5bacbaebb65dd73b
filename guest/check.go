package guest

// One visit of a VM by a guest-checker worker: which checks are due, the calls (only through
// the allowlist, with the command timeout on the wire), how failures are classified and
// counted, and how the results are recorded.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/veil"
)

// errGuestCommandRefused is returned for a command outside the read-only allowlist.
var errGuestCommandRefused = errors.New("guest command refused: not in the read-only allowlist")

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
		offered, err := g.available(ctx, v.id)
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
		dur, err := g.ping(ctx, v.id)
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
			g.reconnected(ctx, v.id, &p, &r)
		}
	} else if down {
		// The agent missed its last ping: nothing else until a ping succeeds.
		p.os, p.fs, p.time, p.net, p.stats = false, false, false, false, false
	}
	g.readDue(ctx, v.id, p, &r)
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

// reconnected plans the visit of an agent back after missed pings, maybe restarted or
// upgraded: what it offers and who it is are asked again, and its measurements refreshed now
// rather than at their phase.
func (g *Checker) reconnected(ctx context.Context, id string, p *checkPlan, r *checkResult) {
	r.reconnect = true
	if p.offered != nil {
		if offered, err := g.available(ctx, id); err == nil {
			r.offered = offered
		}
	}
	p.os, p.fs, p.time, p.net = true, g.cfg.FSInfoInterval > 0, g.cfg.TimeInterval > 0, true
	p.stats = g.cfg.StatsInterval > 0
}

// readDue reads what p says is due and the guest offers into r.
func (g *Checker) readDue(ctx context.Context, id string, p checkPlan, r *checkResult) {
	if p.os && r.offered[guestCmdOSInfo] {
		r.os, _ = g.osInfo(ctx, id)
	}
	if p.fs && r.offered[guestCmdFSInfo] {
		fs, err := g.fsInfo(ctx, id)
		r.fs, r.fsDone = fs, err == nil
	}
	if p.time && r.offered[guestCmdTime] {
		off, err := g.clockOffset(ctx, id)
		r.clock, r.timeDone = off, err == nil
	}
	if p.net && r.offered[guestCmdInterfaces] {
		nics, ipv6, err := g.interfaces(ctx, id)
		r.nics, r.ipv6, r.netDone = nics, ipv6, err == nil
	}
	if p.stats {
		g.readStats(ctx, id, r.offered, r)
	}
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
	defer g.changed()
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
	g.reschedule(v, now, p)
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
	v.nextFS, v.nextTime, v.nextNet, v.nextStats = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	g.leaveSweep(v.id, now)
	v.nextPing = guestNextSlot(now.Add(g.cfg.OSInfoInterval), g.pingInterval, v.phase)
	v.nextOS = v.nextPing
	heap.Push(&g.queue, v)
	g.signal()
}

// call sends one allowlisted command with send and counts its failure. It is the only path by
// which the checker sends guest commands.
func (g *Checker) call(ctx context.Context, id, cmd string, send func() error) error {
	if !guestCommandAllowed(cmd) {
		return fmt.Errorf("%s: %w", cmd, errGuestCommandRefused)
	}
	if err := send(); err != nil {
		if ctx.Err() == nil { // not our own shutdown
			g.countError(id, cmd, guestReason(err), err)
		}
		return fmt.Errorf("guest command %s on %s: %w", cmd, id, err)
	}
	return nil
}

func (g *Checker) available(ctx context.Context, id string) (map[string]bool, error) {
	list, err := g.client.AvailableGuestCommands(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			g.countError(id, guestCmdAvailable, guestReason(err), err)
		}
		return nil, fmt.Errorf("available guest commands of %s: %w", id, err)
	}
	return g.offeredSet(list), nil
}

// offeredSet is the set of the commands in list that the checker may send. Guests offer the
// same few sets: one map per distinct set is shared by every VM offering it (read only), not
// one per VM of every command the agent lists.
func (g *Checker) offeredSet(list []string) map[string]bool {
	known := make([]string, 0, 8)
	for _, c := range list {
		if guestCommandAllowed(c) && !slices.Contains(known, c) {
			known = append(known, c)
		}
	}
	slices.Sort(known)
	key := strings.Join(known, ",")
	g.offeredMu.Lock()
	defer g.offeredMu.Unlock()
	if m, ok := g.offered[key]; ok {
		return m
	}
	m := make(map[string]bool, len(known))
	for _, c := range known {
		m[c] = true
	}
	if g.offered == nil {
		g.offered = map[string]map[string]bool{}
	}
	g.offered[key] = m
	return m
}

func (g *Checker) ping(ctx context.Context, id string) (float64, error) {
	var rtt time.Duration
	err := g.call(ctx, id, guestCmdPing, func() (err error) {
		rtt, err = g.client.GuestPing(ctx, id, g.cfg.CommandTimeout)
		return err
	})
	return rtt.Seconds(), err
}

func (g *Checker) osInfo(ctx context.Context, id string) (*veil.GuestOSInfo, error) {
	var info *veil.GuestOSInfo
	err := g.call(ctx, id, guestCmdOSInfo, func() (err error) {
		info, err = g.client.GuestOSInfo(ctx, id, g.cfg.CommandTimeout)
		return err
	})
	return info, err
}

func (g *Checker) fsInfo(ctx context.Context, id string) ([]guestFS, error) {
	var list []veil.GuestFilesystem
	err := g.call(ctx, id, guestCmdFSInfo, func() (err error) {
		list, err = g.client.GuestFSInfo(ctx, id, g.cfg.CommandTimeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	fs, cut := guestFilesystems(list, g.cfg.FSTypesExclude, g.mountsOut)
	if cut > 0 {
		g.client.Reject(veil.Rejection{Collection: guestCmdFSInfo, ID: id, Reason: veil.RejectOverLimit, Count: cut,
			Err: fmt.Errorf("the guest reports %d filesystems more than the %d exported per VM", cut, maxGuestDevices)})
	}
	return fs, nil
}

// clockOffset is guest time minus exporter time at the middle of the round trip.
func (g *Checker) clockOffset(ctx context.Context, id string) (float64, error) {
	var c veil.GuestClock
	err := g.call(ctx, id, guestCmdTime, func() (err error) {
		c, err = g.client.GuestTime(ctx, id, g.cfg.CommandTimeout)
		return err
	})
	return c.Offset().Seconds(), err
}

// interfaces reads the guest's interfaces: their counters, and its first IPv6 address that
// service discovery may hand out.
func (g *Checker) interfaces(ctx context.Context, id string) ([]guestNIC, string, error) {
	var list []veil.GuestNetworkInterface
	err := g.call(ctx, id, guestCmdInterfaces, func() (err error) {
		list, err = g.client.GuestNetworkInterfaces(ctx, id, g.cfg.CommandTimeout)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return guestInterfaces(list, g.nicsOut), guestIPv6(list, g.nicsOut), nil
}

// readStats reads the statistics the guest offers, each command on its own: a command the guest
// refuses or answers wrongly leaves that family of the VM empty (no stale counters, nothing
// invented), its error counted, the others read as usual.
func (g *Checker) readStats(ctx context.Context, id string, offered map[string]bool, r *checkResult) {
	r.statsDone = true
	if offered[guestCmdDiskStats] {
		var list []veil.GuestDiskStats
		if g.call(ctx, id, guestCmdDiskStats, func() (err error) {
			list, err = g.client.GuestDiskStats(ctx, id, g.cfg.CommandTimeout)
			return err
		}) == nil {
			r.disks = guestDisks(list, g.disksOut)
		}
	}
	if offered[guestCmdCPUStats] {
		var list []veil.GuestCPUStats
		if g.call(ctx, id, guestCmdCPUStats, func() (err error) {
			list, err = g.client.GuestCPUStats(ctx, id, g.cfg.CommandTimeout)
			return err
		}) == nil {
			r.cpu = guestCPUSeconds(list)
		}
	}
	if offered[guestCmdLoad] {
		var l veil.GuestLoad
		if g.call(ctx, id, guestCmdLoad, func() (err error) {
			l, err = g.client.GuestLoad(ctx, id, g.cfg.CommandTimeout)
			return err
		}) == nil {
			r.load = guestLoadAverages(l)
		}
	}
}

// countError counts a failed call; api_error (the controller, not the guest, failed) makes the
// sweep unsuccessful.
func (g *Checker) countError(id, cmd, reason string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.vms[id]; v != nil && v.unsupported && reason == "not_supported" {
		return // counted when the VM was marked; the probe only confirms it
	}
	g.errs[guestErrKey{cmd, reason}]++
	g.lastEr = fmt.Sprintf("%s on %s: %s", cmd, id, reason)
	g.lastErID, g.lastErCmd, g.lastErReason = id, cmd, reason
	g.sweep.errCount++
	if guestControllerFailure(reason, err) {
		g.sweep.apiErrs++
		g.sweep.apiErr = g.lastEr
	}
	level.Debug(g.logger).Log("msg", "guest command failed", "domain_id", id, "command", cmd, "reason", reason, "err", err)
}

// guestControllerFailure tells failures of the controller (5xx, no answer, bad token, bad
// body) from refusals about one VM (400: not running, Linux only), which are no reason to
// report the collector as failing.
func guestControllerFailure(reason string, err error) bool {
	if reason != "api_error" {
		return false
	}
	var ae *veil.APIError
	if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 &&
		ae.StatusCode != 401 && ae.StatusCode != 403 {
		return false
	}
	return true
}

// guestReason is the reason label of veil_guest_command_errors_total for a failed call:
// timeout, agent_not_running, not_supported, bad_answer (a statistics command's result of the
// wrong shape: the guest's agent, not the controller), or api_error for everything else (the
// controller failed, or answered something unreadable).
func guestReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, veil.ErrGuestTimeout):
		return "timeout"
	case errors.Is(err, veil.ErrAgentNotRunning):
		return "agent_not_running"
	case errors.Is(err, veil.ErrGuestUnsupported):
		return "not_supported"
	case errors.Is(err, veil.ErrGuestAnswer):
		return "bad_answer"
	}
	return "api_error"
}
