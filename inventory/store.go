package inventory

// The store of one controller, its core: the snapshot and the locks, Run, and which collections
// each refresh reads. A refresh itself is in refresh.go, how each collection is read in
// collect.go; the parts of the store have files of their own: the push channel's pacing
// (pacing.go), the refresh record (record.go), the observer side (observe.go), the names book
// (names.go), the domain filter (filter.go) and the detail sweep (details.go).

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
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
	// VersionEvery: the controller's version is read at every this many refreshes, and at the
	// first one after an outage (an upgrade restarts the controller).
	VersionEvery = 10
)

// Store keeps the latest good snapshot of one controller's nodes, clusters, datapools, domains,
// tasks, disks, interfaces and version: listed at each refresh (Run), changed between them by
// the push channel (Apply), completed by the device detail sweep. Readers take immutable
// Snapshots and never wait for the controller. A small core with named parts (doc.go).
type Store struct {
	controller string
	client     *veil.Client
	cfg        config.Collect
	logger     log.Logger
	enabled    []string     // the collections read, the version last
	filter     domainFilter // domain_include/exclude (filter.go)
	tasks      *taskTracker
	backups    *backupTracker
	details    deviceSweep // the detail sweep (details.go), in Run's goroutine of its own

	// refreshMu keeps one Refresh at a time and is held while it waits for the API; mu is
	// held only to read or swap the state below, so readers never wait for the controller.
	refreshMu sync.Mutex

	mu        sync.RWMutex
	snap      *Snapshot
	record    refreshRecord // the refreshes' record (record.go); its outage under refreshMu
	names     nameBook      // uuid -> name of nodes, clusters, datapools, domains (names.go)
	pacing    pushPacing    // the push channel's pacing and the replay (pacing.go)
	observing observing     // the Observer and the listings kept for it (observe.go)
}

// NewStore returns the store of one controller; it fails without a client.
func NewStore(controller string, client *veil.Client, cfg config.Collect, logger log.Logger) (*Store, error) {
	if client == nil {
		return nil, errors.New("inventory needs a client")
	}
	if logger == nil {
		logger = log.NewNopLogger()
	}
	s := &Store{
		controller: controller,
		client:     client,
		cfg:        cfg,
		logger:     log.With(logger, "controller", controller),
		record:     refreshRecord{runs: map[string]*collectionRun{}},
		names:      nameBook{},
		pacing:     pushPacing{kick: make(chan struct{}, 1)},
	}
	s.record.outage.Logger, s.record.outage.EachCause = s.logger, true
	s.details = deviceSweep{client: client, every: cfg.DeviceDetailsInterval, logger: s.logger, snapshot: s.Snapshot, store: s.storeDetails}
	backupRe := cfg.BackupTaskPattern.Regexp()
	lookback := time.Duration(cfg.BackupLookback)
	if backupRe == nil {
		lookback = 0 // nothing to look back for
	}
	s.tasks = newTaskTracker(maxTaskKinds, lookback)
	s.backups = newBackupTracker(backupRe, lookback)
	s.snap = &Snapshot{Gen: 1, backupLookback: lookback, changed: make(chan struct{})}
	s.filter = domainFilter{include: cfg.DomainInclude.Regexp(), exclude: cfg.DomainExclude.Regexp()}
	for _, c := range []struct {
		name string
		on   bool
	}{{collNodes, cfg.Nodes}, {collClusters, cfg.Clusters}, {collDatapools, cfg.Datapools}, {collDomains, cfg.Domains}, {collTasks, cfg.Tasks},
		{collVdisks, cfg.Vdisks}, {collInterfaces, cfg.Interfaces}} {
		if c.on {
			s.enabled = append(s.enabled, c.name)
			s.record.runs[c.name] = &collectionRun{}
		}
	}
	if cfg.DeviceDetailsInterval > 0 && (cfg.Vdisks || cfg.Interfaces) {
		s.record.runs[collDetails] = &collectionRun{} // not listed by refreshes: the detail sweep runs it
	}
	s.enabled = append(s.enabled, collVersion)
	s.record.runs[collVersion] = &collectionRun{}
	return s, nil
}

// Controller is the name of the store's controller.
func (s *Store) Controller() string { return s.controller }

// Snapshot returns the latest snapshot. It is immutable: wait on its Changed for the next.
func (s *Store) Snapshot() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap
}

// publish stores next as the latest snapshot and signals the one it replaces; s.mu is held.
func (s *Store) publish(next *Snapshot) {
	prev := s.snap
	s.snap = next
	close(prev.changed)
}

// Run refreshes at once and then every collect.interval (or at once after a Resync) until ctx
// is done.
func (s *Store) Run(ctx context.Context) {
	if s.record.runs[collDetails] != nil {
		detailsDone := make(chan struct{})
		go func() {
			defer close(detailsDone)
			s.details.run(ctx)
		}()
		defer func() { <-detailsDone }()
	}
	s.pacing.awaitDial(ctx)
	interval := s.cfg.Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// Refreshes never overlap (the next starts once this one ended and a tick came); each
		// is bounded by Refresh itself.
		_ = s.Refresh(ctx) // errors are kept in the status and logged on state change
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.pacing.kick:
		}
	}
}

// RefreshLimit is how long one refresh may take; a refresh still running then is abandoned
// (failed). A slow controller may take longer than one interval, its requests each bounded by
// the client's timeout, but data three intervals old is stale anyway: three intervals, except
// for a refresh that lists the pushed collections in full (the first, each resync, always
// without push), which gets at least a minute. A large inventory's listing, or many
// controllers' first listings at once on a slow machine, may take longer than three short
// intervals, and a listing cut off starts over from its first page: every controller's in
// step, none would end.
func RefreshLimit(interval time.Duration, full bool) time.Duration {
	if full {
		return max(3*interval, time.Minute)
	}
	return 3 * interval
}

// Refresh reads every enabled collection concurrently (within the client's limits) and
// replaces the snapshot of each one that succeeded. It returns the failures joined; a
// collection the controller lacks (404, 403, 405) is not one: it is marked unavailable and
// asked again at every unavailableRetryEvery-th refresh only. The version, which changes only
// with an upgrade, is read at every VersionEvery-th refresh and after an outage.
func (s *Store) Refresh(ctx context.Context) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()

	names, full, reload := s.due()
	ctx, cancel := context.WithTimeout(ctx, RefreshLimit(s.cfg.Interval, full))
	defer cancel()
	if reload {
		// The token file may have been rotated since the 401; read it before trying again.
		if err := s.client.ReloadToken(); err != nil {
			level.Debug(s.logger).Log("msg", "couldn't reload token", "err", err)
		}
	}
	r := &refresh{s: s, start: time.Now()}
	s.mu.Lock()
	s.record.lastStart = r.start
	s.mu.Unlock()
	r.read(ctx, names)
	if errors.Is(ctx.Err(), context.Canceled) {
		// Cut short because the exporter is stopping this controller (shutdown, reload): that
		// says nothing about the controller, so keep the last state and the last good data.
		s.mu.Lock()
		s.pacing.abandon()
		s.observing.dropListings()
		s.mu.Unlock()
		return ctx.Err()
	}
	r.judge()
	r.store()
	r.log()
	return r.err
}

// due returns the collections to read in this refresh, whether they list the pushed
// collections in full, and whether the token must be read again first (the last refresh got
// 401/403).
func (s *Store) due() (names []string, full, reloadToken bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names = make([]string, 0, len(s.enabled))
	now := time.Now()
	resync := s.pacing.resyncDue(now)
	down := s.snap.Refreshed && !s.snap.Up
	for _, name := range s.enabled {
		if s.record.skips(name, down) || !s.pacing.lists(name, resync, now) {
			continue
		}
		full = full || pushedCollection(name)
		names = append(names, name)
	}
	return names, full, s.record.authFailed
}
