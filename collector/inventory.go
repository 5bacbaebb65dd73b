package collector

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Names of the inventory collections, as in the collector label.
const (
	collNodes     = "nodes"
	collClusters  = "clusters"
	collDatapools = "datapools"
	collDomains   = "domains"
	collTasks     = "tasks"
)

// Inventory keeps the latest good snapshot of one controller's nodes, clusters, datapools,
// domains and tasks, refreshed in the background, and exposes it as metrics.
type Inventory struct {
	controller string
	client     *veil.Client
	cfg        config.Collect
	include    *regexp.Regexp // nil: every domain
	exclude    *regexp.Regexp // nil: none
	logger     log.Logger
	enabled    []string
	descs      *inventoryDescs
	tasks      *taskTracker

	// refreshMu keeps one Refresh at a time and is held while it waits for the API; mu is
	// held only to read or swap the state below, so readers never wait for the controller.
	refreshMu sync.Mutex

	mu           sync.RWMutex
	snap         snapshot
	runs         map[string]*collectionRun
	up           bool
	refreshed    bool
	authFailed   bool // the last refresh got 401/403: reload the token before the next
	lastAttempt  time.Time
	lastDuration time.Duration
	lastError    string
}

// snapshot holds immutable slices: a refresh replaces them, scrapes only read them.
type snapshot struct {
	nodes        []veil.Node
	clusters     []veil.Cluster
	datapools    []veil.Datapool
	domains      []veil.Domain // filtered
	domainsTotal int           // before filtering
	taskCounts   map[string]float64
}

type collectionRun struct {
	success     bool
	duration    time.Duration
	lastSuccess time.Time
	err         string
}

// CollectionStatus is the state of one collection (nodes, domains, ...).
type CollectionStatus struct {
	Name        string
	Success     bool
	Duration    time.Duration
	LastSuccess time.Time
	Error       string
}

// InventoryStatus is what the status page shows of one controller's inventory.
type InventoryStatus struct {
	Controller   string
	Up           bool
	Ready        bool // the first refresh has finished (successfully or not)
	AuthFailed   bool
	LastAttempt  time.Time
	LastDuration time.Duration
	LastError    string
	Nodes        int
	Clusters     int
	Datapools    int
	Domains      int // after domain_include/exclude
	DomainsTotal int
	Tasks        map[string]int // by status
	Collections  []CollectionStatus
}

// NewInventory returns the inventory of one controller; it fails on an invalid domain filter.
func NewInventory(controller string, client *veil.Client, cfg config.Collect, logger log.Logger) (*Inventory, error) {
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
		descs:      newInventoryDescs(controller, refreshInterval(cfg.Interval)),
		tasks:      newTaskTracker(maxTaskNames),
		runs:       map[string]*collectionRun{},
	}
	var err error
	if cfg.DomainInclude != "" {
		if inv.include, err = regexp.Compile(cfg.DomainInclude); err != nil {
			return nil, fmt.Errorf("invalid domain_include: %w", err)
		}
	}
	if cfg.DomainExclude != "" {
		if inv.exclude, err = regexp.Compile(cfg.DomainExclude); err != nil {
			return nil, fmt.Errorf("invalid domain_exclude: %w", err)
		}
	}
	for _, c := range []struct {
		name string
		on   bool
	}{{collNodes, cfg.Nodes}, {collClusters, cfg.Clusters}, {collDatapools, cfg.Datapools}, {collDomains, cfg.Domains}, {collTasks, cfg.Tasks}} {
		if c.on {
			inv.enabled = append(inv.enabled, c.name)
			inv.runs[c.name] = &collectionRun{}
		}
	}
	return inv, nil
}

// Run refreshes at once and then every collect.interval until ctx is done.
func (inv *Inventory) Run(ctx context.Context) {
	interval := refreshInterval(inv.cfg.Interval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// A refresh never outlives its interval, so a slow controller cannot pile them up.
		rctx, cancel := context.WithTimeout(ctx, interval)
		_ = inv.Refresh(rctx) // errors are kept in the status and logged on state change
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshInterval is collect.interval, or 30s when unset (config.Load never leaves it unset),
// so that Run and the HELP texts agree.
func refreshInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return 30 * time.Second
	}
	return d
}

// Refresh reads every enabled collection concurrently (within the client's limits) and
// replaces the snapshot of each one that succeeded. It returns the failures joined.
func (inv *Inventory) Refresh(ctx context.Context) error {
	inv.refreshMu.Lock()
	defer inv.refreshMu.Unlock()

	inv.mu.RLock()
	reload := inv.authFailed
	inv.mu.RUnlock()
	if reload {
		// The token file may have been rotated since the 401; read it before trying again.
		if err := inv.client.ReloadToken(); err != nil {
			level.Debug(inv.logger).Log("msg", "couldn't reload token", "err", err)
		}
	}

	start := time.Now()
	type result struct {
		name string
		err  error
		d    time.Duration
		set  func(*snapshot)
	}
	results := make(chan result, len(inv.enabled))
	for _, name := range inv.enabled {
		go func() {
			t0 := time.Now()
			set, err := inv.collect(ctx, name)
			results <- result{name: name, err: err, d: time.Since(t0), set: set}
		}()
	}
	// Gather every result before taking inv.mu: scrapes, the status page and the guest
	// checker read the snapshot meanwhile and must not wait for a slow controller.
	done := make([]result, 0, len(inv.enabled))
	for range inv.enabled {
		done = append(done, <-results)
	}
	finished := time.Now()
	if errors.Is(ctx.Err(), context.Canceled) {
		// Cut short because the exporter is stopping this controller (shutdown, reload): that
		// says nothing about the controller, so keep the last state and the last good data.
		return ctx.Err()
	}

	var errs []error
	auth := false
	for _, r := range done {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("couldn't get %s: %w", r.name, r.err))
			auth = auth || errors.Is(r.err, veil.ErrUnauthorized) || errors.Is(r.err, veil.ErrForbidden)
		}
	}
	err := errors.Join(errs...)
	msg := ""
	if auth {
		msg = fmt.Sprintf("controller %s rejected the token (401/403): check token/token_file; it is re-read before the next attempt", inv.controller)
	} else if err != nil {
		msg = err.Error()
	}
	next := refreshStateUp
	switch {
	case auth:
		next = refreshStateAuth
	case err != nil:
		next = refreshStateDown
	}

	inv.mu.Lock()
	snap := inv.snap
	for _, r := range done {
		run := inv.runs[r.name]
		run.duration = r.d
		if r.err != nil {
			run.success, run.err = false, r.err.Error()
			continue
		}
		r.set(&snap)
		run.success, run.err, run.lastSuccess = true, "", finished
	}
	inv.snap = snap
	prev := refreshStateNone
	switch {
	case !inv.refreshed:
	case inv.authFailed:
		prev = refreshStateAuth
	case inv.up:
		prev = refreshStateUp
	default:
		prev = refreshStateDown
	}
	inv.up = err == nil
	inv.authFailed = auth
	inv.refreshed = true
	inv.lastAttempt = start
	inv.lastDuration = finished.Sub(start)
	inv.lastError = msg
	inv.mu.Unlock()

	// One log line per state change, not per failed refresh: a token that keeps failing or
	// a controller that stays down is logged when it starts and when it recovers.
	if next == prev {
		return err
	}
	switch next {
	case refreshStateAuth:
		level.Error(inv.logger).Log("msg", msg)
	case refreshStateDown:
		level.Warn(inv.logger).Log("msg", "controller down: inventory refresh failed, serving the last good data", "err", err)
	case refreshStateUp:
		if prev == refreshStateNone {
			level.Info(inv.logger).Log("msg", "first inventory refresh done", "duration", finished.Sub(start))
		} else {
			level.Info(inv.logger).Log("msg", "controller back up: inventory refresh succeeded")
		}
	}
	return err
}

// refreshState is what the last refresh found, for logging only its changes.
type refreshState int

const (
	refreshStateNone refreshState = iota // no refresh finished yet
	refreshStateUp
	refreshStateDown
	refreshStateAuth // the token was rejected
)

// collect reads one collection and returns how to store it in the snapshot.
func (inv *Inventory) collect(ctx context.Context, name string) (func(*snapshot), error) {
	switch name {
	case collNodes:
		v, err := inv.client.Nodes(ctx)
		return func(s *snapshot) { s.nodes = v }, err
	case collClusters:
		v, err := inv.client.Clusters(ctx)
		return func(s *snapshot) { s.clusters = v }, err
	case collDatapools:
		v, err := inv.client.Datapools(ctx)
		return func(s *snapshot) { s.datapools = v }, err
	case collDomains:
		v, err := inv.client.Domains(ctx, nil)
		if err != nil {
			return nil, err
		}
		filtered := inv.filterDomains(v)
		return func(s *snapshot) { s.domains, s.domainsTotal = filtered, len(v) }, nil
	case collTasks:
		counts, err := inv.tasks.refresh(ctx, inv.client)
		return func(s *snapshot) { s.taskCounts = counts }, err
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

// Domains returns the latest domain snapshot after domain_include/exclude. The slice is
// shared: callers must not modify it.
func (inv *Inventory) Domains() []veil.Domain {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.snap.domains
}

// Ready reports whether the first refresh has finished.
func (inv *Inventory) Ready() bool {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.refreshed
}

// Status returns a copy of the inventory's state for the status page.
func (inv *Inventory) Status() InventoryStatus {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	st := InventoryStatus{
		Controller:   inv.controller,
		Up:           inv.up,
		Ready:        inv.refreshed,
		AuthFailed:   inv.authFailed,
		LastAttempt:  inv.lastAttempt,
		LastDuration: inv.lastDuration,
		LastError:    inv.lastError,
		Nodes:        len(inv.snap.nodes),
		Clusters:     len(inv.snap.clusters),
		Datapools:    len(inv.snap.datapools),
		Domains:      len(inv.snap.domains),
		DomainsTotal: inv.snap.domainsTotal,
		Tasks:        map[string]int{},
	}
	for s, n := range inv.snap.taskCounts {
		st.Tasks[s] = int(n)
	}
	for _, name := range inv.enabled {
		r := inv.runs[name]
		st.Collections = append(st.Collections, CollectionStatus{
			Name: name, Success: r.success, Duration: r.duration, LastSuccess: r.lastSuccess, Error: r.err,
		})
	}
	return st
}
