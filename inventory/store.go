package inventory

// The store of one controller: its state, Run, and which collections each refresh reads. A
// refresh itself is in refresh.go, how each collection is read in collect.go.

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
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
	// VersionEvery: the controller's version is read at every this many refreshes, and at the
	// first one after an outage (an upgrade restarts the controller).
	VersionEvery = 10
	// nameRetention keeps the name of an object gone from the inventory this long, so that
	// the task deleting a VM, seen after the VM, still finds its name to replace.
	nameRetention = time.Hour
)

// Store keeps the latest good snapshot of one controller's nodes, clusters, datapools, domains,
// tasks, disks, interfaces and version: listed at each refresh (Run), changed between them by
// the push channel (Apply), completed by the device detail sweep. Readers take immutable
// Snapshots and never wait for the controller.
type Store struct {
	controller string
	client     *veil.Client
	cfg        config.Collect
	include    *regexp.Regexp // nil: every domain
	exclude    *regexp.Regexp // nil: none
	logger     log.Logger
	outage     runstatus.Outage // of the controller: down or rejecting the token
	enabled    []string
	tasks      *taskTracker
	backups    *backupTracker

	// refreshMu keeps one Refresh at a time and is held while it waits for the API; mu is
	// held only to read or swap the state below, so readers never wait for the controller.
	refreshMu sync.Mutex

	mu           sync.RWMutex
	snap         *Snapshot
	runs         map[string]*collectionRun
	names        map[string]knownName // uuid -> name of nodes, clusters, datapools, domains
	authFailed   bool                 // the last refresh got 401/403: reload the token before the next
	lastAttempt  time.Time
	lastStart    time.Time // of the refresh running now, or of the last one
	lastDuration time.Duration
	lastError    string

	// The push channel (push.go): pushed says it keeps the pushed collections fresh, resyncAt
	// is when they are listed next while it does; listing says a refresh is listing them, and
	// replay holds the frames applied meanwhile, applied again over its result.
	pushed   bool
	mustList bool // list them at the next refresh (Resync, or the last listing failed)
	resyncAt time.Time
	slowAt   time.Time // when the slow collections are listed next
	listing  bool
	replay   []veil.PushFrame
	kick     chan struct{} // a refresh now (Resync)
	// pushDialed is closed once a push channel's first dial ended (nil: no push channel); the
	// first refresh waits for it, so that a socket opened meanwhile does not list it all again.
	pushDialed chan struct{}
	observer   Observer               // nil: none (observe.go)
	listed     map[string][]RawObject // listings of the refresh being stored, for the observer
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
		runs:       map[string]*collectionRun{},
		names:      map[string]knownName{},
		kick:       make(chan struct{}, 1),
	}
	s.outage.Logger, s.outage.EachCause = s.logger, true
	backupRe := cfg.BackupTaskPattern.Regexp()
	lookback := time.Duration(cfg.BackupLookback)
	if backupRe == nil {
		lookback = 0 // nothing to look back for
	}
	s.tasks = newTaskTracker(maxTaskKinds, lookback)
	s.backups = newBackupTracker(backupRe, lookback)
	s.snap = &Snapshot{Gen: 1, backupLookback: lookback, changed: make(chan struct{})}
	s.include, s.exclude = cfg.DomainInclude.Regexp(), cfg.DomainExclude.Regexp()
	for _, c := range []struct {
		name string
		on   bool
	}{{collNodes, cfg.Nodes}, {collClusters, cfg.Clusters}, {collDatapools, cfg.Datapools}, {collDomains, cfg.Domains}, {collTasks, cfg.Tasks},
		{collVdisks, cfg.Vdisks}, {collInterfaces, cfg.Interfaces}} {
		if c.on {
			s.enabled = append(s.enabled, c.name)
			s.runs[c.name] = &collectionRun{}
		}
	}
	if cfg.DeviceDetailsInterval > 0 && (cfg.Vdisks || cfg.Interfaces) {
		s.runs[collDetails] = &collectionRun{} // not listed by refreshes: runDetails runs it
	}
	s.enabled = append(s.enabled, collVersion)
	s.runs[collVersion] = &collectionRun{}
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
	if s.runs[collDetails] != nil {
		detailsDone := make(chan struct{})
		go func() {
			defer close(detailsDone)
			s.runDetails(ctx)
		}()
		defer func() { <-detailsDone }()
	}
	s.awaitPushDial(ctx)
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
		case <-s.kick:
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

// pushDialWait bounds how long the first refresh waits for the push channel's first dial.
const pushDialWait = 10 * time.Second

// awaitPushDial waits, before the first refresh, until the push channel's first dial ended
// (or pushDialWait passed): a socket opened during that refresh would list everything again
// at once, since the listing began before the socket could carry changes. The Resync of that
// connect is then the first refresh itself.
func (s *Store) awaitPushDial(ctx context.Context) {
	if s.pushDialed == nil {
		return
	}
	t := time.NewTimer(pushDialWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.pushDialed:
	case <-t.C:
	}
	select {
	case <-s.kick: // the connect's Resync: the first refresh lists everything anyway
	default:
	}
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
	s.lastStart = r.start
	s.mu.Unlock()
	r.read(ctx, names)
	if errors.Is(ctx.Err(), context.Canceled) {
		// Cut short because the exporter is stopping this controller (shutdown, reload): that
		// says nothing about the controller, so keep the last state and the last good data.
		s.mu.Lock()
		s.mustList = s.mustList || s.listing
		s.listing, s.replay = false, nil
		clear(s.listed)
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
	resync := !s.pushed || s.mustList || !now.Before(s.resyncAt)
	for _, name := range s.enabled {
		r := s.runs[name]
		if name == collVersion && s.snap.Refreshed && !s.snap.Up {
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
			s.listing, s.mustList, full = true, false, true
		}
		if slowCollections[name] && now.Before(s.slowAt) {
			continue
		}
		names = append(names, name)
	}
	return names, full, s.authFailed
}

// learnName records the names of objects just listed; s.mu is held. Names of objects gone
// are kept for nameRetention, for the tasks that removed them.
func (s *Store) learnName(now time.Time, id, name string) {
	s.names[id] = knownName{name, now}
}

// forgetNames drops names not listed for nameRetention; s.mu is held.
func (s *Store) forgetNames(now time.Time) {
	for id, n := range s.names {
		if now.Sub(n.seen) > nameRetention {
			delete(s.names, id)
		}
	}
}

// nameOf looks up a name for the task kinds; s.mu is held.
func (s *Store) nameOf(id string) (string, bool) {
	n, ok := s.names[id]
	return n.name, ok
}
