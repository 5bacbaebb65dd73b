package inventory

// One refresh: what each collection's read returned, what the reads say together about the
// controller, and the snapshot they make.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/veil"
)

// refresh is one Refresh: what each collection's read returned and what they say together
// about the controller.
type refresh struct {
	s                *Store
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

// collected is one collection's read; set stores it in the next snapshot, with s.mu held.
type collected struct {
	name string
	err  error
	d    time.Duration
	set  func(*Snapshot)
}

// read reads the collections concurrently and gathers every result before s.mu is taken:
// scrapes, the status page and the guest checker read the snapshot meanwhile and must not wait
// for a slow controller.
func (r *refresh) read(ctx context.Context, names []string) {
	results := make(chan collected, len(names))
	for _, name := range names {
		go func() {
			t0 := time.Now()
			set, err := r.s.collect(ctx, name, r.start)
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
		r.msg = fmt.Sprintf("controller %s rejected the token (401/403): check token/token_file; it is re-read before the next attempt", r.s.controller)
	case r.err != nil:
		r.msg = r.err.Error()
	}
}

// store stores the next snapshot, with the collections read, and records the refresh, under
// s.mu.
func (r *refresh) store() {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.snap.next()
	// done: no listing of them failed (unavailable is done too).
	pushed, slow := listedKind{done: true}, listedKind{done: true}
	prev := s.snap
	for i, c := range r.done {
		r.account(s.record.runs[c.name], c, r.fails[i], snap)
		failed := r.fails[i] == failDown || r.fails[i] == failAuth
		if pushedCollection(c.name) {
			pushed.listed, pushed.done = true, pushed.done && !failed
		}
		if slowCollections[c.name] {
			slow.listed, slow.done = true, slow.done && !failed
		}
	}
	// Only what the device families show moves DevicesGen: a refresh that read the same disks,
	// interfaces, VMs and datapools leaves them rendered as they are.
	if devicesChanged(prev, snap) {
		snap.DevicesGen++
	}
	// The next listing of each kind is due an interval after this one began, once it worked:
	// a listing that failed (the one after a reconnect, say) is tried again at the next refresh.
	s.pacing.listed(r.start, max(s.cfg.ResyncInterval, s.cfg.Interval), pushed, slow)
	if replay, listing := s.pacing.endReplay(); listing {
		// Frames pushed while the collections were listed are newer than some of the pages:
		// applied again over them, and folded into the listings the observer gets (which saw
		// each frame when it came), so that nobody sees an object go back to an older state.
		e := &edit{snap: snap, replaying: true}
		for _, f := range replay {
			s.applyFrame(e, f, r.finished)
		}
		s.observing.handListings(replay)
	}
	var made bool
	if snap.backups, made = s.backups.frozen(snap.backups); made {
		snap.BackupsGen++
	}
	s.names.forget(r.start)
	r.first = !snap.Refreshed
	snap.Up, snap.Refreshed = r.err == nil, true
	s.record.ended(r.start, r.finished, r.auth, r.msg)
	r.retryUnavailable = s.cfg.Interval * unavailableRetryEvery
	s.publish(snap)
}

// account stores one collection's read in snap and in its run, by how it failed.
func (r *refresh) account(run *collectionRun, c collected, f failure, snap *Snapshot) {
	run.duration = c.d
	switch f {
	case failNone:
		if run.unavailable {
			r.back = append(r.back, c)
		}
		c.set(snap)
		run.success, run.err, run.lastSuccess, run.unavailable, run.skip = true, "", r.finished, false, 0
		if c.name == collVersion {
			run.skip = VersionEvery - 1
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

// log tells of collections gone or back, and of the controller's state when it changed (the
// record's outage): a token that keeps failing or a controller that stays down is logged when
// it starts, when its cause changes and when it recovers, not at every refresh.
func (r *refresh) log() {
	logger := r.s.logger
	for _, c := range r.gone {
		level.Warn(logger).Log("msg", "collection not available on this controller (not an outage); asked again every "+r.retryUnavailable.String(),
			"collection", c.name, "reason", c.err)
	}
	for _, c := range r.back {
		level.Info(logger).Log("msg", "collection available again", "collection", c.name)
	}
	switch {
	case r.auth:
		r.s.record.outage.Fail(r.finished, level.Error, r.msg, nil)
	case r.err != nil:
		r.s.record.outage.Fail(r.finished, level.Warn, "controller down: inventory refresh failed, serving the last good data", r.err)
	case r.first:
		level.Info(logger).Log("msg", "first inventory refresh done", "duration", r.finished.Sub(r.start))
	default:
		r.s.record.outage.Recover(r.finished, "controller back up: inventory refresh succeeded")
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
func clearCollection(name string, s *Snapshot) {
	switch name {
	case collNodes:
		s.Nodes = nil
	case collClusters:
		s.Clusters = nil
	case collDatapools:
		s.Datapools = nil
	case collDomains:
		s.Domains, s.DomainsTotal = VMs{}, 0
		s.DomainsGen++
	case collTasks:
		s.TaskCounts = nil
	case collVersion:
		s.Version = ""
	case collVdisks:
		s.Vdisks, s.PoolProvisioned = nil, nil
	case collInterfaces:
		s.Interfaces = nil
	}
}
