package guest

// The guest checker: the read-only command allowlist, the Checker (its core state: the VMs under
// one lock, and its parts), the constructor, Run with its workers and the dispatcher that hands
// them due VMs. The parts, each in its own file: the inventory as followed (snapshots,
// inventory.go, with the sync loop), when each VM is visited (schedule, schedule.go), the calls
// to the guests (guestCommands, commands.go), full ping sweeps and the run status (guestSweep,
// sweep.go), the failed commands (commandErrors, commanderrors.go). One visit of a VM is in
// check.go, the series in metrics.go and render.go, what is kept of filesystems and interfaces
// in data.go, the status page's and service discovery's views in problems.go.

import (
	"context"
	"sync"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
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
	guestCmdDiskStats  = "guest-get-diskstats" // newer agents only, like the two below
	guestCmdCPUStats   = "guest-get-cpustats"
	guestCmdLoad       = "guest-get-load"

	// guestCmdAvailable is not a guest command but the endpoint listing them; it appears in
	// veil_guest_command_errors_total like one.
	guestCmdAvailable = "available-guest-cmds"
)

// guestCommandAllowed is the allowlist: read-only commands only, fixed in the code so that no
// configuration can make the exporter run guest-exec, file, password, suspend, shutdown or
// freeze commands inside a customer's VM.
func guestCommandAllowed(cmd string) bool {
	switch cmd {
	case guestCmdPing, guestCmdInfo, guestCmdOSInfo, guestCmdFSInfo, guestCmdTime,
		guestCmdHostName, guestCmdInterfaces, guestCmdDiskStats, guestCmdCPUStats, guestCmdLoad:
		return true
	}
	return false
}

// Status summarises guest-check coverage for the status page.
type Status struct {
	Eligible, Checked int           // running VMs with a connected agent; of those, pinged at least once
	Unsupported       int           // VMs on which the platform refuses guest commands; not in Eligible
	SweepDuration     time.Duration // real time of the last full ping sweep
	LastSweep         time.Time     // when the last full ping sweep ended
	LastError         string        // last failed command, with VM name, id and reason
	// The last failed command apart: the VM (its name, the id when it has none), the command and
	// the reason; LastIsState says the reason is a state of the guest (agent not running,
	// commands not supported), not a failure.
	LastErrorDomain, LastErrorDomainID, LastErrorCommand, LastErrorReason string
	LastIsState                                                           bool
}

// Checker checks the guest agents of one controller's running VMs: guest-ping every
// ping interval, guest-get-osinfo on connect and every osinfo interval, guest-get-fsinfo,
// guest-get-time, guest-network-get-interfaces and the statistics (guest-get-diskstats,
// guest-get-cpustats, guest-get-load, where the guest offers them) on their intervals. Each VM has fixed phases
// inside the intervals (hashes of its id), so calls spread evenly instead of bursting; a
// time-ordered queue holding each VM at most once feeds at most cfg.Concurrency workers. When
// the inventory is too large for the request budget, checks stretch instead of piling up. It
// is a prometheus.Collector and a runstatus.Reporter.
type Checker struct {
	cfg    config.Guest
	logger log.Logger

	domains snapshots      // the inventory as last read
	cmds    *guestCommands // the calls to the guests; no VM state

	// Guarded by mu: the VMs, when each is visited, the sweeps and the failed commands.
	mu        sync.Mutex
	syncedGen uint64 // the inventory generation g.vms follows
	vms       map[string]*guestVM
	// stopped holds VMs the platform said are not running (or have no agent) although the
	// inventory snapshot of the generation stored said they were; they stay out until a newer
	// snapshot says they run.
	stopped map[string]uint64
	sched   schedule
	sweep   guestSweep
	errs    commandErrors

	// The series (metrics.go) and their rendered text (render.go), rendered again after every
	// change.
	descs guestDescs
	cache *exposition.Cache
}

// guestVM is the checker's state of one eligible VM. Fields are guarded by Checker.mu;
// while a worker checks the VM it is out of the queue (index -1), so nobody else schedules it.
type guestVM struct {
	id    string
	phase float64 // 0..1, the ping's position inside its interval
	// slow is the other checks' position inside theirs, a second hash of the id: when the
	// checker runs behind, VMs are visited in the order of their ping phase, and reads at that
	// same phase would alias with the sweep (most VMs' reads in one sweep, few in the next).
	slow  float64
	index int  // in the queue; -1 while checked by a worker
	gone  bool // no longer eligible: drop it when its check returns

	nextPing, nextOS, nextFS, nextTime, nextNet, nextStats time.Time       // zero = not scheduled
	cmds                                                   map[string]bool // offered by the guest; nil = ask
	agentDown                                              bool            // last ping failed
	// unsupported: the platform refuses guest commands for this VM (Windows guests where the
	// controller allows Linux only). No series, not in the coverage; probed again every
	// osinfo interval, and afresh when the agent reconnects (the VM leaves and comes back).
	unsupported bool

	pinged bool
	guestMeasures
}

// guestMeasures is what the checks measured of one guest: what its series show.
type guestMeasures struct {
	pingOK   bool
	pingDur  float64
	os       *veil.GuestOSInfo
	fs       []guestFS
	nics     []guestNIC
	ipv6     string // first global IPv6 address of the guest's interfaces; "" if none
	hasClock bool
	clock    float64
	disks    []guestDisk
	cpu      *guestCPU  // nil: not offered, not read yet, or no mode reported by every CPU
	load     *guestLoad // nil: not offered or not read yet
}

// forget drops every measurement: they would lie about a guest that cannot be reached or has
// just reconnected (maybe another system).
func (v *guestVM) forget() {
	v.os, v.fs, v.nics, v.ipv6, v.hasClock = nil, nil, nil, "", false
	v.disks, v.cpu, v.load = nil, nil, nil
}

// Outputs are where a checker says what it does: its log (nil: none), and the renderer whose
// scrapes its renders yield to and prepare the formats of (nil: neither).
type Outputs struct {
	Logger   log.Logger
	Renderer *exposition.Renderer
}

// NewChecker returns a checker for the VMs that domains returns (the latest inventory
// snapshot, already filtered and never modified; a new generation means new domains). All
// calls go through client, whose rate and concurrency limits are the controller's budget.
func NewChecker(controller string, client *veil.Client, cfg config.Guest, domains DomainSource, out Outputs) *Checker {
	logger, r := out.Logger, out.Renderer
	if logger == nil {
		logger = log.NewNopLogger()
	}
	g := &Checker{
		cfg:     cfg,
		logger:  log.With(logger, "collector", "guest", "controller", controller),
		domains: snapshots{src: domains},
		vms:     map[string]*guestVM{},
		stopped: map[string]uint64{},
		sched:   newSchedule(cfg),
		descs:   newGuestDescs(controller),
	}
	g.cmds = newGuestCommands(client, cfg, g.countError)
	g.sweep.logger = g.logger
	g.sweep.outage.Logger = g.logger
	g.cache = exposition.NewCache(r, exposition.Pace{Every: guestRenderEvery(cfg.PingInterval), Share: renderShare}, g.render, nil)
	return g
}

// Run checks guests until ctx is done; it returns after every goroutine it started has ended.
// Call it once per checker.
func (g *Checker) Run(ctx context.Context) {
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
	wg.Add(2)
	go func() {
		defer wg.Done()
		g.syncLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		g.cache.Run(ctx)
	}()
	g.dispatch(ctx, work)
	close(work)
	wg.Wait()
}

// dispatch hands each VM to a worker when its earliest check is due. Sending blocks while all
// workers are busy: then checks run late, in order of due time, and the sweep stretches.
func (g *Checker) dispatch(ctx context.Context, work chan<- *guestVM) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		g.mu.Lock()
		next, wait := g.sched.popDue()
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
		case <-g.sched.wake:
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
		g.sched.add(v)
	}
}
