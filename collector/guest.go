package collector

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Guest-agent commands the checker knows. Only those accepted by guestCommandAllowed are
// ever sent; everything that writes, executes, freezes or powers off stays out of reach.
const (
	guestCmdPing       = "guest-ping"
	guestCmdInfo       = "guest-info"
	guestCmdOSInfo     = "guest-get-osinfo"
	guestCmdFSInfo     = "guest-get-fsinfo"
	guestCmdTime       = "guest-get-time"
	guestCmdHostName   = "guest-get-host-name"
	guestCmdInterfaces = "guest-network-get-interfaces"

	// guestCmdAvailable is not a guest command but the endpoint listing them; it appears in
	// veil_guest_command_errors_total like one.
	guestCmdAvailable = "available-guest-cmds"
)

// errGuestCommandRefused is returned for a command outside the read-only allowlist.
var errGuestCommandRefused = errors.New("guest command refused: not in the read-only allowlist")

// guestCommandAllowed is the allowlist: read-only commands only, fixed in the code so that no
// configuration can make the exporter run guest-exec, file, password, suspend, shutdown or
// freeze commands inside a customer's VM.
func guestCommandAllowed(cmd string) bool {
	switch cmd {
	case guestCmdPing, guestCmdInfo, guestCmdOSInfo, guestCmdFSInfo, guestCmdTime,
		guestCmdHostName, guestCmdInterfaces:
		return true
	}
	return false
}

// GuestStatus summarises guest-check coverage for the status page.
type GuestStatus struct {
	Eligible, Checked int           // running VMs with a connected agent; of those, pinged at least once
	Unsupported       int           // VMs on which the platform refuses guest commands; not in Eligible
	SweepDuration     time.Duration // real time of the last full ping sweep
	LastSweep         time.Time     // when the last full ping sweep ended
	LastError         string        // last failed command, with VM id and reason
}

// GuestChecker checks the guest agents of one controller's running VMs: guest-ping every
// ping interval, guest-get-osinfo on connect and every osinfo interval, guest-get-fsinfo and
// guest-get-time on their intervals. Each VM has a fixed phase inside each interval (a hash of
// its id), so calls spread evenly instead of bursting; a time-ordered queue holding each VM at
// most once feeds at most cfg.Concurrency workers. When the inventory is too large for the
// request budget, checks stretch instead of piling up. It is a prometheus.Collector.
type GuestChecker struct {
	controller string
	client     *veil.Client
	cfg        config.Guest
	domains    func() []veil.Domain
	logger     log.Logger

	pingInterval time.Duration
	syncEvery    time.Duration
	wake         chan struct{} // the queue changed; the dispatcher re-reads its head

	descs guestDescs

	mu  sync.Mutex
	vms map[string]*guestVM
	// stopped holds VMs the platform said are not running (or have no agent) although the
	// inventory snapshot, identified by its first element, said they were; they stay out until
	// another snapshot says they run.
	stopped map[string]*veil.Domain
	queue   guestQueue
	errs    map[guestErrKey]float64
	sweep   guestSweep
	lastEr  string
}

type guestErrKey struct{ command, reason string }

// guestVM is the checker's state of one eligible VM. Fields are guarded by GuestChecker.mu;
// while a worker checks the VM it is out of the queue (index -1), so nobody else schedules it.
type guestVM struct {
	id    string
	phase float64 // 0..1, position inside every interval
	index int     // in the queue; -1 while checked by a worker
	gone  bool    // no longer eligible: drop it when its check returns

	nextPing, nextOS, nextFS, nextTime time.Time       // zero = not scheduled
	cmds                               map[string]bool // offered by the guest; nil = ask
	agentDown                          bool            // last ping failed
	// unsupported: the platform refuses guest commands for this VM (Windows guests where the
	// controller allows Linux only). No series, not in the coverage; probed again every
	// osinfo interval, and afresh when the agent reconnects (the VM leaves and comes back).
	unsupported bool

	pinged   bool
	pingOK   bool
	pingDur  float64
	os       *veil.GuestOSInfo
	fs       []guestFS
	hasClock bool
	clock    float64
}

type guestFS struct {
	mountpoint, fstype, device string
	size, used                 float64
}

func (v *guestVM) due() time.Time {
	d := v.nextPing
	for _, t := range []time.Time{v.nextOS, v.nextFS, v.nextTime} {
		if !t.IsZero() && t.Before(d) {
			d = t
		}
	}
	return d
}

// guestSweep follows full ping sweeps: a sweep starts with the VMs eligible at that moment and
// ends when each of them has had its ping (or has left).
type guestSweep struct {
	start    time.Time
	pending  map[string]struct{}
	apiErrs  int // controller-side failures during this sweep
	running  bool
	done     bool // at least one sweep finished
	dur      time.Duration
	end      time.Time
	ok       bool
	okEnd    time.Time
	errCount int // command errors during this sweep, for the log line
}

type guestDescs struct {
	pingSuccess, pingDuration, osInfo, fsSize, fsUsed, clockOffset, cmdErrors,
	sweepDuration, eligible, checked, unsupported *prometheus.Desc
}

// NewGuestChecker returns a checker for the VMs that domains returns (the latest inventory
// snapshot, already filtered; it is never modified). All calls go through client, whose rate
// and concurrency limits are the controller's budget.
func NewGuestChecker(controller string, client *veil.Client, cfg config.Guest, domains func() []veil.Domain, logger log.Logger) *GuestChecker {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = 5 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	g := &GuestChecker{
		controller:   controller,
		client:       client,
		cfg:          cfg,
		domains:      domains,
		logger:       log.With(logger, "collector", "guest", "controller", controller),
		pingInterval: cfg.PingInterval,
		syncEvery:    min(max(cfg.PingInterval/4, 20*time.Millisecond), time.Second),
		wake:         make(chan struct{}, 1),
		vms:          map[string]*guestVM{},
		stopped:      map[string]*veil.Domain{},
		errs:         map[guestErrKey]float64{},
	}
	// controller is a constant label so that one registry can hold a checker per controller.
	cl := prometheus.Labels{"controller": controller}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	g.descs = guestDescs{
		pingSuccess: d("veil_guest_ping_success",
			fmt.Sprintf("1 if the last guest-ping of the VM's guest agent succeeded (every %s, longer when the request budget is short).", cfg.PingInterval),
			"domain_id"),
		pingDuration: d("veil_guest_ping_duration_seconds",
			fmt.Sprintf("Round trip of the last guest-ping through the controller (every %s, longer when the request budget is short).", cfg.PingInterval),
			"domain_id"),
		osInfo: d("veil_guest_os_info",
			fmt.Sprintf("Guest operating system from guest-get-osinfo, asked when the agent connects and every %s; value 1.", cfg.OSInfoInterval),
			"domain_id", "os_id", "os_name", "os_version", "kernel_release", "machine", "pretty_name"),
		fsSize: d("veil_guest_filesystem_size_bytes",
			fmt.Sprintf("Filesystem size from guest-get-fsinfo, cached for %s.", cfg.FSInfoInterval),
			"domain_id", "mountpoint", "fstype", "device"),
		fsUsed: d("veil_guest_filesystem_used_bytes",
			fmt.Sprintf("Filesystem used bytes from guest-get-fsinfo, cached for %s.", cfg.FSInfoInterval),
			"domain_id", "mountpoint", "fstype", "device"),
		clockOffset: d("veil_guest_clock_offset_seconds",
			fmt.Sprintf("Guest clock minus exporter clock from guest-get-time, corrected by half the round trip; cached for %s.", cfg.TimeInterval),
			"domain_id"),
		cmdErrors: d("veil_guest_command_errors_total",
			"Failed guest-agent calls by command (available-guest-cmds for the command list) and reason (timeout, agent_not_running, not_supported, api_error).",
			"command", "reason"),
		sweepDuration: d("veil_guest_sweep_duration_seconds", "Real time of the last full guest-ping sweep over all eligible VMs; above ping_interval when the budget is too small."),
		eligible:      d("veil_guest_eligible_domains", "Running VMs with a connected guest agent (guest checks apply)."),
		checked:       d("veil_guest_checked_domains", "Eligible VMs that have had a guest-ping since they became eligible."),
		unsupported: d("veil_guest_unsupported_domains",
			fmt.Sprintf("Running VMs with a connected agent on which the platform refuses guest commands (for example Windows guests where it allows Linux only); they have no veil_guest_* series, are not in veil_guest_eligible_domains and are asked again every %s or when their agent reconnects.", cfg.OSInfoInterval)),
	}
	return g
}

// Run checks guests until ctx is done; it returns after every goroutine it started has ended.
// Call it once per checker.
func (g *GuestChecker) Run(ctx context.Context) {
	work := make(chan *guestVM)
	var wg sync.WaitGroup
	for range g.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range work {
				g.check(ctx, v)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.syncLoop(ctx)
	}()
	g.dispatch(ctx, work)
	close(work)
	wg.Wait()
}

// syncLoop follows the inventory: VMs that become eligible are queued at their phase, VMs that
// stop being eligible are dropped.
func (g *GuestChecker) syncLoop(ctx context.Context) {
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

func (g *GuestChecker) sync(now time.Time) {
	doms := g.domains()
	eligible, snap := guestEligible(doms), guestSnapshotID(doms)
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, seen := range g.stopped {
		if seen != snap {
			delete(g.stopped, id) // a newer snapshot decides
		}
	}
	for id := range g.stopped {
		delete(eligible, id)
	}
	changed := false
	for id, v := range g.vms {
		if _, ok := eligible[id]; ok {
			continue
		}
		delete(g.vms, id)
		v.gone = true
		if v.index >= 0 {
			heap.Remove(&g.queue, v.index)
		}
		g.leaveSweep(id, now)
	}
	for id := range eligible {
		if _, ok := g.vms[id]; ok {
			continue
		}
		v := &guestVM{id: id, phase: guestPhase(id)}
		v.nextPing = guestNextSlot(now, g.pingInterval, v.phase)
		v.nextOS = v.nextPing // on connect
		if g.cfg.FSInfoInterval > 0 {
			v.nextFS = guestNextSlot(now, g.cfg.FSInfoInterval, v.phase)
		}
		if g.cfg.TimeInterval > 0 {
			v.nextTime = guestNextSlot(now, g.cfg.TimeInterval, v.phase)
		}
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

func (g *GuestChecker) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// dispatch hands each VM to a worker when its earliest check is due. Sending blocks while all
// workers are busy: then checks run late, in order of due time, and the sweep stretches.
func (g *GuestChecker) dispatch(ctx context.Context, work chan<- *guestVM) {
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

// checkPlan is what one visit of a VM does, decided from its schedule.
type checkPlan struct {
	ping, os, fs, time bool
	offered            map[string]bool // nil: ask available-guest-cmds first
}

// checkResult is what one visit learned; finish records it.
type checkResult struct {
	offered          map[string]bool
	failed           bool // the agent did not answer (ping or command list)
	unsupported      bool // the platform refuses guest commands for this VM
	stopped          bool // the platform says the VM or its agent is not running
	snap             *veil.Domain
	pinged, pingOK   bool
	pingDur          float64
	reconnect        bool
	os               *veil.GuestOSInfo
	fsDone, timeDone bool
	fs               []guestFS
	clock            float64
}

// check runs the checks of one VM that are due, then puts it back in the queue. Checks of one
// VM run one after another: a guest agent answers one command at a time anyway.
func (g *GuestChecker) check(ctx context.Context, v *guestVM) {
	now := time.Now()
	g.mu.Lock()
	if v.gone { // left the inventory while waiting for a worker
		g.mu.Unlock()
		return
	}
	p := checkPlan{
		ping:    !v.nextPing.After(now),
		os:      !v.nextOS.IsZero() && !v.nextOS.After(now),
		fs:      !v.nextFS.IsZero() && !v.nextFS.After(now),
		time:    !v.nextTime.IsZero() && !v.nextTime.After(now),
		offered: v.cmds,
	}
	down := v.agentDown
	g.mu.Unlock()

	// The snapshot that made the VM eligible: a refusal as not running holds until a newer one.
	r := checkResult{offered: p.offered, snap: guestSnapshotID(g.domains())}
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
			// The agent is back, maybe restarted or upgraded: ask again what it offers and who
			// it is, and refresh its measurements now rather than at their phase.
			r.reconnect = true
			if p.offered != nil {
				if offered, err := g.available(ctx, v.id); err == nil {
					r.offered = offered
				}
			}
			p.os, p.fs, p.time = true, g.cfg.FSInfoInterval > 0, g.cfg.TimeInterval > 0
		}
	} else if down {
		// The agent missed its last ping: nothing else until a ping succeeds.
		p.os, p.fs, p.time = false, false, false
	}
	if p.os && r.offered[guestCmdOSInfo] {
		r.os, _ = g.osInfo(ctx, v.id)
	}
	if p.fs && r.offered[guestCmdFSInfo] {
		fs, err := g.fsInfo(ctx, v.id)
		r.fs, r.fsDone = fs, err == nil
	}
	if p.time && r.offered[guestCmdTime] {
		off, err := g.clockOffset(ctx, v.id)
		r.clock, r.timeDone = off, err == nil
	}
	if ctx.Err() != nil {
		g.requeue(v)
		return
	}
	g.finish(v, now, p, r)
}

// classify tells, from a failed ping or command list, refusals about the VM itself from an
// agent that does not answer.
func (r *checkResult) classify(err error) {
	switch guestReason(err) {
	case "not_supported":
		r.unsupported = true
	case "agent_not_running":
		r.stopped = true
	}
}

// finish records a visit under the lock, reschedules the VM and, when the visit was its ping,
// counts it in the current sweep.
func (g *GuestChecker) finish(v *guestVM, now time.Time, p checkPlan, r checkResult) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case v.gone:
	case r.stopped:
		g.drop(v, r.snap, now)
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
		v.os, v.fs, v.hasClock = nil, nil, false
	default:
		if r.pinged {
			v.pinged, v.pingOK, v.pingDur, v.agentDown = true, r.pingOK, r.pingDur, false
		}
		if r.reconnect {
			v.os, v.fs, v.hasClock = nil, nil, false
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
	}
	g.reschedule(v, now, p)
	if p.ping && !v.gone {
		g.leaveSweep(v.id, time.Now())
	}
}

// drop removes a VM the platform says is not running, or has no agent running, although the
// inventory snapshot snap said otherwise: the snapshot is stale, pinging on would only count
// errors. It comes back with the next snapshot that says it runs.
func (g *GuestChecker) drop(v *guestVM, snap *veil.Domain, now time.Time) {
	if g.vms[v.id] == v {
		delete(g.vms, v.id)
	}
	v.gone = true
	g.stopped[v.id] = snap
	g.leaveSweep(v.id, now)
	level.Debug(g.logger).Log("msg", "guest checks paused until the inventory says the VM runs", "domain_id", v.id)
}

// markUnsupported takes a VM the platform refuses guest commands for out of the checks and the
// coverage. Its error was counted once, by the call that found it; until osinfo_interval has
// passed nothing more is sent, then one probe (command list and ping) tells whether it still
// holds. Without an osinfo interval only a reconnect of the agent brings it back.
func (g *GuestChecker) markUnsupported(v *guestVM, now time.Time) {
	if !v.unsupported {
		level.Debug(g.logger).Log("msg", "platform refuses guest commands for this VM; checks paused", "domain_id", v.id, "retry_after", g.cfg.OSInfoInterval)
	}
	v.unsupported = true
	v.pinged, v.pingOK, v.pingDur, v.agentDown = false, false, 0, true
	v.os, v.fs, v.hasClock = nil, nil, false
	v.cmds = nil // ask the list again with the probe
	v.nextFS, v.nextTime = time.Time{}, time.Time{}
	g.leaveSweep(v.id, now)
	if g.cfg.OSInfoInterval <= 0 {
		return // out of the queue: it stays until it leaves the inventory
	}
	v.nextPing = guestNextSlot(now.Add(g.cfg.OSInfoInterval), g.pingInterval, v.phase)
	v.nextOS = v.nextPing
	heap.Push(&g.queue, v)
	g.signal()
}

// requeue puts a VM back without results (the checker is stopping), so a later Run goes on.
func (g *GuestChecker) requeue(v *guestVM) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !v.gone {
		heap.Push(&g.queue, v)
	}
}

// reschedule moves every check that ran to its next slot and queues the VM again. Pings keep
// their phase exactly; the others come back about one interval later, at their phase.
func (g *GuestChecker) reschedule(v *guestVM, now time.Time, p checkPlan) {
	if p.ping {
		v.nextPing = guestAdvance(v.nextPing, g.pingInterval, v.phase, now)
	}
	later := func(interval time.Duration) time.Time {
		return guestNextSlot(now.Add(interval/2), interval, v.phase)
	}
	switch {
	case v.agentDown || v.os == nil:
		v.nextOS = v.nextPing // with the next ping, until answered once per connection
	case p.os && g.cfg.OSInfoInterval > 0:
		v.nextOS = later(g.cfg.OSInfoInterval)
	case p.os:
		v.nextOS = time.Time{}
	}
	if p.fs && g.cfg.FSInfoInterval > 0 {
		v.nextFS = later(g.cfg.FSInfoInterval)
	}
	if p.time && g.cfg.TimeInterval > 0 {
		v.nextTime = later(g.cfg.TimeInterval)
	}
	if v.agentDown {
		// Nothing but the ping is sent to an agent that missed it; a check due before the ping
		// would bring the VM back to a worker at once, again and again, doing nothing.
		for _, t := range []*time.Time{&v.nextFS, &v.nextTime} {
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

func (g *GuestChecker) startSweep(now time.Time) {
	g.sweep.start = now
	g.sweep.running = true
	g.sweep.apiErrs, g.sweep.errCount = 0, 0
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
func (g *GuestChecker) leaveSweep(id string, now time.Time) {
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
	s.running, s.done = false, true
	s.dur, s.end = now.Sub(s.start), now
	s.ok = s.apiErrs == 0
	if s.ok {
		s.okEnd = now
	}
	switch {
	case s.apiErrs > 0:
		level.Warn(g.logger).Log("msg", "guest sweep finished with controller errors", "errors", s.errCount, "api_errors", s.apiErrs, "duration", s.dur, "last_error", g.lastEr)
	case s.errCount > 0:
		level.Debug(g.logger).Log("msg", "guest sweep finished with failed guest commands", "errors", s.errCount, "duration", s.dur)
	}
	g.startSweep(now)
}

// guestAnswer is the result of one guest command and the timing of its HTTP exchange.
type guestAnswer struct {
	raw        []byte
	start, end time.Time // the whole call, including waiting for the client's limits
	sent, recv time.Time // request written, first byte of the answer; zero when not observed
}

// rtt is the round trip of the exchange itself, so that waiting for the client's rate limiter
// does not count; the whole call when the transport told nothing.
func (a guestAnswer) rtt() time.Duration {
	if !a.sent.IsZero() && !a.recv.IsZero() && !a.recv.Before(a.sent) {
		return a.recv.Sub(a.sent)
	}
	return a.end.Sub(a.start)
}

// mid is the instant the guest most likely answered: the middle of the round trip.
func (a guestAnswer) mid() time.Time {
	if !a.sent.IsZero() && !a.recv.IsZero() && !a.recv.Before(a.sent) {
		return a.sent.Add(a.recv.Sub(a.sent) / 2)
	}
	return a.start.Add(a.end.Sub(a.start) / 2)
}

// call sends one allowlisted command, with the command timeout. It is the only path by which
// the checker sends guest commands.
func (g *GuestChecker) call(ctx context.Context, id, cmd string) (guestAnswer, error) {
	var a guestAnswer
	if !guestCommandAllowed(cmd) {
		return a, fmt.Errorf("%s: %w", cmd, errGuestCommandRefused)
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CommandTimeout)
	defer cancel()
	var mu sync.Mutex // the transport calls the hooks from its own goroutines
	cctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			a.sent, a.recv = time.Now(), time.Time{}
			mu.Unlock()
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			a.recv = time.Now()
			mu.Unlock()
		},
	})
	a.start = time.Now()
	raw, err := g.client.GuestCommand(cctx, id, cmd, struct{}{}, g.cfg.CommandTimeout)
	a.end = time.Now()
	mu.Lock()
	defer mu.Unlock()
	a.raw = raw
	if err != nil {
		if ctx.Err() == nil { // not our own shutdown
			g.countError(id, cmd, guestReason(err), err)
		}
		return a, fmt.Errorf("guest command %s on %s: %w", cmd, id, err)
	}
	return a, nil
}

func (g *GuestChecker) available(ctx context.Context, id string) (map[string]bool, error) {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CommandTimeout)
	defer cancel()
	list, err := g.client.AvailableGuestCommands(cctx, id)
	if err != nil {
		if ctx.Err() == nil {
			g.countError(id, guestCmdAvailable, guestReason(err), err)
		}
		return nil, fmt.Errorf("available guest commands of %s: %w", id, err)
	}
	offered := make(map[string]bool, len(list))
	for _, c := range list {
		offered[c] = true
	}
	return offered, nil
}

// countError counts a failed call; api_error (the controller, not the guest, failed) makes the
// sweep unsuccessful.
func (g *GuestChecker) countError(id, cmd, reason string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.vms[id]; v != nil && v.unsupported && reason == "not_supported" {
		return // counted when the VM was marked; the probe only confirms it
	}
	g.errs[guestErrKey{cmd, reason}]++
	g.lastEr = fmt.Sprintf("%s on %s: %s", cmd, id, reason)
	g.sweep.errCount++
	if guestControllerFailure(reason, err) {
		g.sweep.apiErrs++
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

// guestReason classifies a failure; our own deadline is a timeout whatever the client says.
func guestReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return veil.GuestErrorReason(err)
}

func (g *GuestChecker) ping(ctx context.Context, id string) (float64, error) {
	a, err := g.call(ctx, id, guestCmdPing)
	return a.rtt().Seconds(), err
}

func (g *GuestChecker) osInfo(ctx context.Context, id string) (*veil.GuestOSInfo, error) {
	a, err := g.call(ctx, id, guestCmdOSInfo)
	if err != nil {
		return nil, err
	}
	var info veil.GuestOSInfo
	if err := json.Unmarshal(a.raw, &info); err != nil {
		return nil, g.decodeError(id, guestCmdOSInfo, err)
	}
	return &info, nil
}

func (g *GuestChecker) fsInfo(ctx context.Context, id string) ([]guestFS, error) {
	a, err := g.call(ctx, id, guestCmdFSInfo)
	if err != nil {
		return nil, err
	}
	var list []veil.GuestFilesystem
	if err := json.Unmarshal(a.raw, &list); err != nil {
		return nil, g.decodeError(id, guestCmdFSInfo, err)
	}
	return guestFilesystems(list, g.cfg.FSTypesExclude), nil
}

// guestFilesystems keeps the entries with sizes whose type is not excluded, once per
// (mountpoint, type, device) so that repeated mounts cannot make duplicate series.
func guestFilesystems(list []veil.GuestFilesystem, exclude []string) []guestFS {
	out := make([]guestFS, 0, len(list))
	seen := make(map[[3]string]bool, len(list))
	for _, f := range list {
		if f.TotalBytes == nil || f.UsedBytes == nil || slices.Contains(exclude, f.Type) {
			continue
		}
		k := [3]string{f.Mountpoint, f.Type, f.Name}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, guestFS{mountpoint: f.Mountpoint, fstype: f.Type, device: f.Name,
			size: float64(*f.TotalBytes), used: float64(*f.UsedBytes)})
	}
	return out
}

// clockOffset is guest time minus exporter time at the middle of the round trip.
func (g *GuestChecker) clockOffset(ctx context.Context, id string) (float64, error) {
	a, err := g.call(ctx, id, guestCmdTime)
	if err != nil {
		return 0, err
	}
	ns, err := guestNanos(a.raw)
	if err != nil {
		return 0, g.decodeError(id, guestCmdTime, err)
	}
	return float64(ns-a.mid().UnixNano()) / 1e9, nil
}

// guestNanos decodes guest-get-time: an integer of nanoseconds since the epoch.
func guestNanos(raw []byte) (int64, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, err
	}
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64() // an agent or proxy that wrote the integer as a float
	return int64(f), err
}

func (g *GuestChecker) decodeError(id, cmd string, err error) error {
	err = fmt.Errorf("guest command %s on %s: decoding result: %w", cmd, id, err)
	g.countError(id, cmd, "api_error", err)
	return err
}

// Status reports guest-check coverage and the last sweep.
func (g *GuestChecker) Status() GuestStatus {
	doms := g.domains()
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, unsupported := g.coverage(doms)
	st := GuestStatus{Eligible: len(eligible), Unsupported: unsupported, LastError: g.lastEr}
	for id := range eligible {
		if v, ok := g.vms[id]; ok && v.pinged {
			st.Checked++
		}
	}
	if g.sweep.done {
		st.SweepDuration, st.LastSweep = g.sweep.dur, g.sweep.end
	}
	return st
}

// Describe implements prometheus.Collector.
func (g *GuestChecker) Describe(ch chan<- *prometheus.Desc) {
	d := g.descs
	for _, desc := range []*prometheus.Desc{d.pingSuccess, d.pingDuration, d.osInfo, d.fsSize, d.fsUsed,
		d.clockOffset, d.cmdErrors, d.sweepDuration, d.eligible, d.checked, d.unsupported} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector. Only VMs eligible in the current inventory snapshot
// are exported, so stopped, agentless and deleted VMs lose their series at once.
func (g *GuestChecker) Collect(ch chan<- prometheus.Metric) {
	doms := g.domains()
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, unsupported := g.coverage(doms)
	d := g.descs
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	checked := 0
	for id := range eligible {
		v, ok := g.vms[id]
		if !ok || !v.pinged {
			continue
		}
		checked++
		gauge(d.pingSuccess, guestBool(v.pingOK), id)
		gauge(d.pingDuration, v.pingDur, id)
		if o := v.os; o != nil {
			gauge(d.osInfo, 1, id, o.ID, o.Name, o.Version, o.KernelRelease, o.Machine, o.PrettyName)
		}
		for _, f := range v.fs {
			gauge(d.fsSize, f.size, id, f.mountpoint, f.fstype, f.device)
			gauge(d.fsUsed, f.used, id, f.mountpoint, f.fstype, f.device)
		}
		if v.hasClock {
			gauge(d.clockOffset, v.clock, id)
		}
	}
	for k, n := range g.errs {
		ch <- prometheus.MustNewConstMetric(d.cmdErrors, prometheus.CounterValue, n, k.command, k.reason)
	}
	gauge(d.eligible, float64(len(eligible)))
	gauge(d.checked, float64(checked))
	gauge(d.unsupported, float64(unsupported))
	// A run of this collector is a full ping sweep; until the first one ends, the sweep under
	// way says whether the controller answers. The veil_collector_* Descs are shared and
	// described by the inventory collector, not here.
	s := g.sweep
	success, dur := s.apiErrs == 0, time.Duration(0)
	if s.done {
		gauge(d.sweepDuration, s.dur.Seconds())
		success, dur = s.ok, s.dur
	}
	CollectorStatusMetrics(ch, g.controller, "guest", success, dur, s.okEnd)
}

// coverage returns the VMs of the snapshot that guest checks apply to, without those the
// platform refused as not running on this snapshot, and the number it refuses commands for,
// which it leaves out too. g.mu must be held.
func (g *GuestChecker) coverage(doms []veil.Domain) (map[string]struct{}, int) {
	eligible, snap := guestEligible(doms), guestSnapshotID(doms)
	unsupported := 0
	for id := range eligible {
		if seen, ok := g.stopped[id]; ok && seen == snap {
			delete(eligible, id)
		} else if v := g.vms[id]; v != nil && v.unsupported {
			delete(eligible, id)
			unsupported++
		}
	}
	return eligible, unsupported
}

// guestSnapshotID identifies an inventory snapshot: a refresh replaces the slice, so its first
// element is another one (nil for an empty snapshot).
func guestSnapshotID(doms []veil.Domain) *veil.Domain {
	if len(doms) == 0 {
		return nil
	}
	return &doms[0]
}

func guestBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// guestEligible returns the ids of the VMs guest checks apply to: running, not templates, with
// a connected agent.
func guestEligible(domains []veil.Domain) map[string]struct{} {
	out := make(map[string]struct{}, len(domains))
	for i := range domains {
		d := &domains[i]
		if int(d.UserPowerState) == veil.PowerOn && !d.Template && d.GuestUtils.QemuState && d.ID != "" {
			out[d.ID] = struct{}{}
		}
	}
	return out
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
