package inventory

// The push channel's pacing (pushPacing): while the push keeps the pushed collections fresh,
// refreshes list them only every collect.resync_interval (and at once after a (re)connect), the
// slow collections (disks, interfaces) every resync_interval always; a listing of the pushed
// collections keeps the frames applied while it runs (the replay), applied again over its
// result. Guarded by Store.mu, with the snapshot: Apply swaps the snapshot and adds to the replay
// under one lock, and a refresh stores its result and ends the replay under one lock.

import (
	"context"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// pushDialWait bounds how long the first refresh waits for the push channel's first dial.
const pushDialWait = 10 * time.Second

// slowCollections change seldom and are long (disks and interfaces: two or three per VM): they
// are listed every collect.resync_interval, not every collect.interval.
var slowCollections = map[string]bool{collVdisks: true, collInterfaces: true}

// pushedCollection says whether the push keeps collection fresh (one of pushResources'): while
// the push runs it is listed only at a resync.
func pushedCollection(collection string) bool {
	for _, c := range pushResources {
		if c == collection {
			return true
		}
	}
	return false
}

// pushPacing is when the pushed and the slow collections are listed next, and the replay of a
// listing running.
type pushPacing struct {
	pushed   bool      // the push channel keeps the pushed collections fresh
	mustList bool      // list them at the next refresh (Resync, or the last listing failed)
	resyncAt time.Time // when they are listed next while the push runs
	slowAt   time.Time // when the slow collections are listed next
	listing  bool      // a refresh is listing the pushed collections
	replay   []veil.PushFrame
	kick     chan struct{} // a refresh now (Resync); not guarded
	// dialed is closed once a push channel's first dial ended (nil: no push channel); the first
	// refresh waits for it, so that a socket opened meanwhile does not list it all again. Set
	// before Run (NewPushFeed) and not guarded.
	dialed chan struct{}
}

// SetPushed says whether the push channel keeps the pushed collections fresh: while it does,
// refreshes list them only every resync (collect.resync_interval); the others (tasks, version)
// keep collect.interval. Resync makes the next refresh list everything and starts it now.
func (s *Store) SetPushed(on bool) {
	s.mu.Lock()
	s.pacing.pushed = on
	s.mu.Unlock()
}

// Resync lists every collection at the next refresh and starts it now: after every (re)connect
// of the push, since frames sent while the socket was down are lost.
func (s *Store) Resync() {
	s.mu.Lock()
	s.pacing.mustList = true
	s.mu.Unlock()
	select {
	case s.pacing.kick <- struct{}{}:
	default:
	}
}

// awaitDial waits, before the first refresh, until the push channel's first dial ended (or
// pushDialWait passed): a socket opened during that refresh would list everything again at
// once, since the listing began before the socket could carry changes. The Resync of that
// connect is then the first refresh itself.
func (p *pushPacing) awaitDial(ctx context.Context) {
	if p.dialed == nil {
		return
	}
	t := time.NewTimer(pushDialWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-p.dialed:
	case <-t.C:
	}
	select {
	case <-p.kick: // the connect's Resync: the first refresh lists everything anyway
	default:
	}
}

// resyncDue says whether a refresh starting at now lists the pushed collections; s.mu is held.
func (p *pushPacing) resyncDue(now time.Time) bool {
	return !p.pushed || p.mustList || !now.Before(p.resyncAt)
}

// lists says whether a refresh starting at now lists collection name, resync being resyncDue's
// answer; a pushed collection listed starts the replay. s.mu is held.
func (p *pushPacing) lists(name string, resync bool, now time.Time) bool {
	if pushedCollection(name) {
		if !resync {
			return false
		}
		p.listing, p.mustList = true, false
	}
	return !slowCollections[name] || !now.Before(p.slowAt)
}

// keep adds a frame applied to the replay while a listing runs; s.mu is held.
func (p *pushPacing) keep(f veil.PushFrame) {
	if p.listing {
		p.replay = append(p.replay, f)
	}
}

// listed sets when the next listings are due after a refresh that began at start: every later
// for each kind (pushed, slow) it listed without a failure, the pushed collections at the next
// refresh where a listing of them failed (the one after a reconnect, say). s.mu is held.
func (p *pushPacing) listed(start time.Time, every time.Duration, pushed, slow listedKind) {
	switch {
	case pushed.listed && pushed.done:
		p.resyncAt = start.Add(every)
	case pushed.listed:
		p.mustList = true
	}
	if slow.listed && slow.done {
		p.slowAt = start.Add(every)
	}
}

// listedKind says whether a refresh listed a kind of collection (pushed, slow) and whether no
// listing of it failed.
type listedKind struct{ listed, done bool }

// endReplay ends the listing and returns the frames applied while it ran, oldest first (nil
// when no listing ran); s.mu is held.
func (p *pushPacing) endReplay() (replay []veil.PushFrame, listing bool) {
	replay, listing = p.replay, p.listing
	p.listing, p.replay = false, nil
	return replay, listing
}

// abandon ends a listing cut short: the next refresh lists again. s.mu is held.
func (p *pushPacing) abandon() {
	p.mustList = p.mustList || p.listing
	p.listing, p.replay = false, nil
}
