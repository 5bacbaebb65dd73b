package collector

// The inventory of one controller: its collections read at each refresh (Refresh: which are
// due, read concurrently, judged, stored in the snapshot, logged on change) and how each is read.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Names of the inventory collections, as in the collector label.
const (
	collNodes      = "nodes"
	collClusters   = "clusters"
	collDatapools  = "datapools"
	collDomains    = "domains"
	collTasks      = "tasks"
	collVdisks     = "vdisks"     // GET /api/vdisks/
	collInterfaces = "interfaces" // GET /api/vmachine-infs/
	collVersion    = "version"    // the controller's platform version, always read
)

const (
	// unavailableRetryEvery: a collection the controller lacks (404, 403, 405) is asked for
	// again at every this many refreshes only.
	unavailableRetryEvery = 10
	// versionEvery: the controller's version is read at every this many refreshes, and at the
	// first one after an outage (an upgrade restarts the controller).
	versionEvery = 10
	// nameRetention keeps the name of an object gone from the inventory this long, so that
	// the task deleting a VM, seen after the VM, still finds its name to replace.
	nameRetention = time.Hour
)

// Inventory keeps the latest good snapshot of one controller's nodes, clusters, datapools,
// domains, tasks, disks, interfaces and version, refreshed in the background, and exposes it as metrics.
type Inventory struct {
	controller string
	client     *veil.Client
	cfg        config.Collect
	include    *regexp.Regexp // nil: every domain
	exclude    *regexp.Regexp // nil: none
	logger     log.Logger
	outage     runstatus.Outage // of the controller: down or rejecting the token
	enabled    []string
	descs      *inventoryDescs
	tasks      *taskTracker
	backups    *backupTracker

	// refreshMu keeps one Refresh at a time and is held while it waits for the API; mu is
	// held only to read or swap the state below, so readers never wait for the controller.
	refreshMu sync.Mutex

	mu           sync.RWMutex
	snap         snapshot
	runs         map[string]*collectionRun
	names        map[string]knownName // uuid -> name of nodes, clusters, datapools, domains
	up           bool
	refreshed    bool
	authFailed   bool // the last refresh got 401/403: reload the token before the next
	lastAttempt  time.Time
	lastStart    time.Time // of the refresh running now, or of the last one
	lastDuration time.Duration
	lastError    string

	// The push channel (inventory_push.go): pushed says it keeps the pushed collections fresh,
	// resyncAt is when they are listed next while it does; listing says a refresh is listing
	// them, and replay holds the frames applied meanwhile, applied again over its result.
	pushed   bool
	mustList bool // list them at the next refresh (Resync, or the last listing failed)
	resyncAt time.Time
	slowAt   time.Time // when the slow collections are listed next
	listing  bool
	replay   []veil.PushFrame
	kick     chan struct{}          // a refresh now (Resync)
	observer Observer               // nil: none (inventory_observe.go)
	listed   map[string][]RawObject // listings of the refresh being stored, for the observer

	discovery discoveryCache // GuestTargets of the latest snapshot

	// cache holds the gauges of the latest refresh, rendered; ready says they are a refresh's
	// data (renderedRefresh: what the render in progress read, under the cache's lock).
	cache           *exposition.Cache
	ready           atomic.Bool
	renderedRefresh bool
	renderedApplied uint64               // snapshot.applied of the render in progress
	renderHook      func(applied uint64) // set by benchmarks before Run: after each render
	// renderedDevicesGen is snapshot.devicesGen of the last render's device families.
	renderedDevicesGen uint64
	devicesRendered    bool
}

// snapshot holds immutable slices: a refresh replaces them, scrapes only read them.
type snapshot struct {
	nodes        []veil.Node
	clusters     []veil.Cluster
	datapools    []veil.Datapool
	domains      []veil.Domain // filtered, sorted by id
	domainsTotal int           // before filtering
	domainsGen   uint64        // grows each time domains is replaced: the guest checker's cue
	taskCounts   map[string]float64
	version      string // of the platform; "" until read or where the controller lacks it

	vdisks          []vdiskRow              // of the VMs domain_include/exclude select, and free disks; nil: not read
	poolProvisioned map[string]float64      // datapool id → virtual sizes of every disk on it, bytes
	interfaces      []ifaceRow              // of the VMs selected; nil: not read
	applied         uint64                  // pushed frames applied so far (what a render shows)
	devicesGen      uint64                  // grows when what the device families are made of may have changed
	details         map[string]deviceDetail // disk and interface id → what its detail added (inventory_details.go)
}

type collectionRun struct {
	success     bool
	duration    time.Duration
	lastSuccess time.Time
	err         string
	unavailable bool // the controller lacks the collection (404, 403, 405)
	skip        int  // refreshes left before an unavailable collection or the version is asked again
}

// knownName is an object's name and when the inventory last listed it.
type knownName struct {
	name string
	seen time.Time
}

// NewInventory returns the inventory of one controller; it fails without a client.
// Its renders yield to the scrapes of r and prepare the formats they ask for (nil: neither).
func NewInventory(controller string, client *veil.Client, cfg config.Collect, logger log.Logger, r *exposition.Renderer) (*Inventory, error) {
	if client == nil {
		return nil, errors.New("inventory needs a client")
	}
	if logger == nil {
		logger = log.NewNopLogger()
	}
	inv := &Inventory{
		controller: controller,
		client:     client,
		cfg:        cfg,
		logger:     log.With(logger, "controller", controller),
		descs:      newInventoryDescs(controller, cfg.Interval),
		runs:       map[string]*collectionRun{},
		names:      map[string]knownName{},
		kick:       make(chan struct{}, 1),
	}
	inv.outage.Logger, inv.outage.EachCause = inv.logger, true
	backupRe := cfg.BackupTaskPattern.Regexp()
	lookback := time.Duration(cfg.BackupLookback)
	if backupRe == nil {
		lookback = 0 // nothing to look back for
	}
	inv.tasks = newTaskTracker(maxTaskKinds, lookback, taskDurations(controller, cfg.Interval))
	inv.backups = newBackupTracker(backupRe, lookback)
	inv.include, inv.exclude = cfg.DomainInclude.Regexp(), cfg.DomainExclude.Regexp()
	for _, c := range []struct {
		name string
		on   bool
	}{{collNodes, cfg.Nodes}, {collClusters, cfg.Clusters}, {collDatapools, cfg.Datapools}, {collDomains, cfg.Domains}, {collTasks, cfg.Tasks},
		{collVdisks, cfg.Vdisks}, {collInterfaces, cfg.Interfaces}} {
		if c.on {
			inv.enabled = append(inv.enabled, c.name)
			inv.runs[c.name] = &collectionRun{}
		}
	}
	if cfg.DeviceDetailsInterval > 0 && (cfg.Vdisks || cfg.Interfaces) {
		inv.runs[collDetails] = &collectionRun{} // not listed by refreshes: runDetails runs it
	}
	inv.enabled = append(inv.enabled, collVersion)
	inv.runs[collVersion] = &collectionRun{}
	// veil_up 0 until the first refresh
	inv.cache = exposition.NewCache(r, exposition.Pace{}, inv.render, inv.rendered)
	return inv, nil
}

// Run refreshes at once and then every collect.interval (or at once after a Resync) until ctx
// is done.
func (inv *Inventory) Run(ctx context.Context) {
	// Rendering runs beside the refreshes: a refresh ends when its data is stored.
	renderDone := make(chan struct{})
	go func() {
		defer close(renderDone)
		inv.cache.Run(ctx)
	}()
	defer func() { <-renderDone }()
	if inv.runs[collDetails] != nil {
		detailsDone := make(chan struct{})
		go func() {
			defer close(detailsDone)
			inv.runDetails(ctx)
		}()
		defer func() { <-detailsDone }()
	}
	interval := inv.cfg.Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// Refreshes never overlap (the next starts once this one ended and a tick came). A slow
		// controller may take longer than one interval, its requests each bounded by the
		// client's timeout; a refresh still running after three intervals is abandoned (failed):
		// data that old is stale anyway.
		rctx, cancel := context.WithTimeout(ctx, refreshLimit(interval))
		_ = inv.Refresh(rctx) // errors are kept in the status and logged on state change
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-inv.kick:
		}
	}
}

// refreshLimit is how long one refresh may take: three intervals.
func refreshLimit(interval time.Duration) time.Duration { return 3 * interval }

// Refresh reads every enabled collection concurrently (within the client's limits) and
// replaces the snapshot of each one that succeeded. It returns the failures joined; a
// collection the controller lacks (404, 403, 405) is not one: it is marked unavailable and
// asked again at every unavailableRetryEvery-th refresh only. The version, which changes only
// with an upgrade, is read at every versionEvery-th refresh and after an outage.
func (inv *Inventory) Refresh(ctx context.Context) error {
	inv.refreshMu.Lock()
	defer inv.refreshMu.Unlock()

	names, reload := inv.due()
	if reload {
		// The token file may have been rotated since the 401; read it before trying again.
		if err := inv.client.ReloadToken(); err != nil {
			level.Debug(inv.logger).Log("msg", "couldn't reload token", "err", err)
		}
	}
	r := &refresh{inv: inv, start: time.Now()}
	inv.mu.Lock()
	inv.lastStart = r.start
	inv.mu.Unlock()
	r.read(ctx, names)
	if errors.Is(ctx.Err(), context.Canceled) {
		// Cut short because the exporter is stopping this controller (shutdown, reload): that
		// says nothing about the controller, so keep the last state and the last good data.
		inv.mu.Lock()
		inv.mustList = inv.mustList || inv.listing
		inv.listing, inv.replay = false, nil
		clear(inv.listed)
		inv.mu.Unlock()
		return ctx.Err()
	}
	r.judge()
	r.store()
	inv.changed()
	r.log()
	return r.err
}

// due returns the collections to read in this refresh, and whether the token must be read
// again first (the last refresh got 401/403).
func (inv *Inventory) due() (names []string, reloadToken bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	names = make([]string, 0, len(inv.enabled))
	now := time.Now()
	resync := !inv.pushed || inv.mustList || !now.Before(inv.resyncAt)
	for _, name := range inv.enabled {
		r := inv.runs[name]
		if name == collVersion && inv.refreshed && !inv.up {
			r.skip = 0 // the controller may have been down for its upgrade
		}
		if (r.unavailable || name == collVersion) && r.skip > 0 {
			r.skip--
			continue
		}
		if pushedCollection(name) {
			if !resync {
				continue
			}
			inv.listing, inv.mustList = true, false
		}
		if slowCollections[name] && now.Before(inv.slowAt) {
			continue
		}
		names = append(names, name)
	}
	return names, inv.authFailed
}

// refresh is one Refresh: what each collection's read returned and what they say together
// about the controller.
type refresh struct {
	inv              *Inventory
	start, finished  time.Time
	done             []collected // tasks last
	fails            []failure   // of done
	auth             bool        // the token was rejected
	err              error       // the failures that count, joined
	msg              string      // the status page's last error
	first            bool        // no refresh had finished before this one
	gone, back       []collected // collections that became unavailable, or available again
	retryUnavailable time.Duration
}

// collected is one collection's read; set stores it in the snapshot, with inv.mu held.
type collected struct {
	name string
	err  error
	d    time.Duration
	set  func(*snapshot)
}

// read reads the collections concurrently and gathers every result before inv.mu is taken:
// scrapes, the status page and the guest checker read the snapshot meanwhile and must not wait
// for a slow controller.
func (r *refresh) read(ctx context.Context, names []string) {
	results := make(chan collected, len(names))
	for _, name := range names {
		go func() {
			t0 := time.Now()
			set, err := r.inv.collect(ctx, name, r.start)
			results <- collected{name: name, err: err, d: time.Since(t0), set: set}
		}()
	}
	r.done = make([]collected, 0, len(names))
	for range names {
		r.done = append(r.done, <-results)
	}
	r.finished = time.Now()
	// Tasks last: their kinds are derived with the names this refresh has just read.
	sort.SliceStable(r.done, func(i, j int) bool { return r.done[i].name != collTasks && r.done[j].name == collTasks })
}

// judge classifies each read's failure and tells what the refresh found.
func (r *refresh) judge() {
	r.fails = make([]failure, len(r.done))
	for i, c := range r.done {
		r.fails[i] = classify(c.name, c.err)
		r.auth = r.auth || r.fails[i] == failAuth
	}
	var errs []error
	for i, c := range r.done {
		if r.fails[i] == failUnavailable && r.auth && errors.Is(c.err, veil.ErrForbidden) {
			r.fails[i] = failAuth // a token rejected everywhere is not a collection it lacks
		}
		if r.fails[i] == failAuth || r.fails[i] == failDown {
			errs = append(errs, fmt.Errorf("couldn't get %s: %w", c.name, c.err))
		}
	}
	r.err = errors.Join(errs...)
	switch {
	case r.auth:
		r.msg = fmt.Sprintf("controller %s rejected the token (401/403): check token/token_file; it is re-read before the next attempt", r.inv.controller)
	case r.err != nil:
		r.msg = r.err.Error()
	}
}

// store replaces the snapshot's collections read and records the refresh, under inv.mu.
func (r *refresh) store() {
	inv := r.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	snap := inv.snap
	pushedDone, slowDone := true, true // no listing of them failed (unavailable is done too)
	listedPushed, listedSlow := false, false
	for i, c := range r.done {
		r.account(inv.runs[c.name], c, r.fails[i], &snap)
		failed := r.fails[i] == failDown || r.fails[i] == failAuth
		if pushedCollection(c.name) {
			listedPushed, pushedDone = true, pushedDone && !failed
		}
		if slowCollections[c.name] {
			listedSlow, slowDone = true, slowDone && !failed
		}
		if c.name != collTasks && c.name != collVersion {
			snap.devicesGen++ // disks, interfaces, or the VMs and datapools they name
		}
	}
	// The next listing of each kind is due an interval after this one began, once it worked:
	// a listing that failed (the one after a reconnect, say) is tried again at the next refresh.
	every := max(inv.cfg.ResyncInterval, inv.cfg.Interval)
	switch {
	case listedPushed && pushedDone:
		inv.resyncAt = r.start.Add(every)
	case listedPushed:
		inv.mustList = true
	}
	if listedSlow && slowDone {
		inv.slowAt = r.start.Add(every)
	}
	if inv.listing {
		// Frames pushed while the collections were listed are newer than some of the pages:
		// applied again over them, and folded into the listings the observer gets (which saw
		// each frame when it came), so that nobody sees an object go back to an older state.
		e := &edit{snap: snap, replaying: true}
		for _, f := range inv.replay {
			inv.applyFrame(e, f, r.finished)
		}
		snap = e.snap
		inv.observeListings(inv.replay)
		inv.listing, inv.replay = false, nil
	}
	inv.snap = snap
	inv.forgetNames(r.start)
	r.first = !inv.refreshed
	inv.up = r.err == nil
	inv.authFailed = r.auth
	inv.refreshed = true
	inv.lastAttempt = r.start
	inv.lastDuration = r.finished.Sub(r.start)
	inv.lastError = r.msg
	r.retryUnavailable = inv.cfg.Interval * unavailableRetryEvery
}

// account stores one collection's read in snap and in its run, by how it failed.
func (r *refresh) account(run *collectionRun, c collected, f failure, snap *snapshot) {
	run.duration = c.d
	switch f {
	case failNone:
		if run.unavailable {
			r.back = append(r.back, c)
		}
		c.set(snap)
		run.success, run.err, run.lastSuccess, run.unavailable, run.skip = true, "", r.finished, false, 0
		if c.name == collVersion {
			run.skip = versionEvery - 1
		}
	case failUnavailable:
		if !run.unavailable {
			r.gone = append(r.gone, c)
		}
		// The controller says it has no such collection: its old data is not current.
		clearCollection(c.name, snap)
		run.success, run.err, run.unavailable, run.skip = false, c.err.Error(), true, unavailableRetryEvery-1
	default:
		run.success, run.err, run.unavailable, run.skip = false, c.err.Error(), false, 0
	}
}

// log tells of collections gone or back, and of the controller's state when it changed
// (inv.outage): a token that keeps failing or a controller that stays down is logged when it
// starts, when its cause changes and when it recovers, not at every refresh.
func (r *refresh) log() {
	logger := r.inv.logger
	for _, c := range r.gone {
		level.Warn(logger).Log("msg", "collection not available on this controller (not an outage); asked again every "+r.retryUnavailable.String(),
			"collection", c.name, "reason", c.err)
	}
	for _, c := range r.back {
		level.Info(logger).Log("msg", "collection available again", "collection", c.name)
	}
	switch {
	case r.auth:
		r.inv.outage.Fail(r.finished, level.Error, r.msg, nil)
	case r.err != nil:
		r.inv.outage.Fail(r.finished, level.Warn, "controller down: inventory refresh failed, serving the last good data", r.err)
	case r.first:
		level.Info(logger).Log("msg", "first inventory refresh done", "duration", r.finished.Sub(r.start))
	default:
		r.inv.outage.Recover(r.finished, "controller back up: inventory refresh succeeded")
	}
}

// failure is how one collection's read failed.
type failure int

const (
	failNone        failure = iota
	failUnavailable         // the controller lacks it or the token may not read it: not an outage
	failAuth                // the token was rejected
	failDown                // the controller failed
)

// coreCollection: a controller that does not serve nodes or domains is not working, whatever
// it answers; any other collection may be missing (the vendor's mock has no /api/tasks/).
func coreCollection(name string) bool { return name == collNodes || name == collDomains }

func classify(name string, err error) failure {
	if err == nil {
		return failNone
	}
	if errors.Is(err, veil.ErrUnauthorized) {
		return failAuth
	}
	if coreCollection(name) {
		if errors.Is(err, veil.ErrForbidden) {
			return failAuth
		}
		return failDown
	}
	var apiErr *veil.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.StatusCode {
		case http.StatusNotFound, http.StatusForbidden, http.StatusMethodNotAllowed:
			return failUnavailable
		}
	}
	return failDown
}

// clearCollection drops the data of a collection the controller no longer serves.
func clearCollection(name string, s *snapshot) {
	switch name {
	case collNodes:
		s.nodes = nil
	case collClusters:
		s.clusters = nil
	case collDatapools:
		s.datapools = nil
	case collDomains:
		s.domains, s.domainsTotal = nil, 0
		s.domainsGen++
	case collTasks:
		s.taskCounts = nil
	case collVersion:
		s.version = ""
	case collVdisks:
		s.vdisks, s.poolProvisioned = nil, nil
	case collInterfaces:
		s.interfaces = nil
	}
}

// learnName records the names of objects just listed; inv.mu is held. Names of objects gone
// are kept for nameRetention, for the tasks that removed them.
func (inv *Inventory) learnName(now time.Time, id, name string) {
	inv.names[id] = knownName{name, now}
}

// forgetNames drops names not listed for nameRetention; inv.mu is held.
func (inv *Inventory) forgetNames(now time.Time) {
	for id, n := range inv.names {
		if now.Sub(n.seen) > nameRetention {
			delete(inv.names, id)
		}
	}
}

// nameOf looks up a name for the task kinds; inv.mu is held.
func (inv *Inventory) nameOf(id string) (string, bool) {
	n, ok := inv.names[id]
	return n.name, ok
}

// collect reads one collection and returns how to store it in the snapshot; the returned
// function runs with inv.mu held. start is when the refresh began.
func (inv *Inventory) collect(ctx context.Context, name string, start time.Time) (func(*snapshot), error) {
	switch name {
	case collNodes:
		v, raw, err := list(ctx, inv, "/api/nodes/", inv.client.Nodes)
		return func(s *snapshot) {
			s.nodes = v
			for i := range v {
				inv.learnName(start, v[i].ID, v[i].VerboseName)
			}
			inv.observeListed(ClassNode, raw)
		}, err
	case collClusters:
		v, raw, err := list(ctx, inv, "/api/clusters/", inv.client.Clusters)
		return func(s *snapshot) {
			s.clusters = v
			for i := range v {
				inv.learnName(start, v[i].ID, v[i].VerboseName)
			}
			inv.observeListed(ClassCluster, raw)
		}, err
	case collDatapools:
		v, raw, err := list(ctx, inv, "/api/data-pools/", inv.client.Datapools)
		return func(s *snapshot) {
			s.datapools = v
			for i := range v {
				inv.learnName(start, v[i].ID, v[i].VerboseName)
			}
			inv.observeListed(ClassDatapool, raw)
		}, err
	case collDomains:
		v, raw, err := list(ctx, inv, "/api/domains/", func(ctx context.Context) ([]veil.Domain, error) { return inv.client.Domains(ctx, nil) })
		if err != nil {
			return nil, err
		}
		filtered := inv.filterDomains(v)
		// By id: every VM family is then written in client_golang's order as it is emitted, and
		// a render sorts none of them (sorting 10,000 lines per family was a third of its CPU).
		slices.SortFunc(filtered, func(a, b veil.Domain) int { return strings.Compare(a.ID, b.ID) })
		return func(s *snapshot) {
			inv.observeListed(ClassDomain, raw)
			s.domains, s.domainsTotal = filtered, len(v)
			s.domainsGen++
			present := make(map[string]bool, len(v))
			for i := range v {
				// Every VM, filtered out or not: its name must not reach a task kind either.
				inv.learnName(start, v[i].ID, v[i].VerboseName)
				present[v[i].ID] = true
			}
			inv.backups.forget(present, start)
		}, nil
	case collVdisks:
		v, err := inv.client.Vdisks(ctx, nil)
		if err != nil {
			return nil, err
		}
		rows, pools := inv.vdiskRows(v)
		return func(s *snapshot) { s.vdisks, s.poolProvisioned = rows, pools }, nil
	case collInterfaces:
		v, err := inv.client.VMachineInfs(ctx, nil)
		if err != nil {
			return nil, err
		}
		rows := inv.ifaceRows(v)
		return func(s *snapshot) { s.interfaces = rows }, nil
	case collVersion:
		v, err := inv.client.ControllerVersion(ctx)
		return func(s *snapshot) { s.version = v }, err
	case collTasks:
		read, err := inv.tasks.refresh(ctx, inv.client)
		return func(s *snapshot) {
			s.taskCounts = read.counts
			inv.tasks.record(read.fresh, inv.nameOf)
			inv.backups.observe(time.Now(), read.fresh)
		}, err
	}
	return nil, fmt.Errorf("unknown collection %q", name)
}

func (inv *Inventory) filterDomains(all []veil.Domain) []veil.Domain {
	if inv.include == nil && inv.exclude == nil {
		return all
	}
	out := make([]veil.Domain, 0, len(all))
	for _, d := range all {
		if inv.include != nil && !inv.include.MatchString(d.VerboseName) {
			continue
		}
		if inv.exclude != nil && inv.exclude.MatchString(d.VerboseName) {
			continue
		}
		out = append(out, d)
	}
	return out
}
