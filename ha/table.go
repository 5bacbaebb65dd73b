// This file holds the lease table: what this replica knows of the bucket and holds, and the
// rules that decide a round from it at a given instant (acquire, adopt, let go, hand over).
// Nothing here talks to NATS, starts a goroutine or reads the clock: the loop (reconcile.go)
// carries the decisions out and tells the table what came of them.

package ha

import (
	"encoding/json"
	"time"
)

// times are a replica's lease time and what follows from it: the renew period (ttl/3) and the
// margin a lease is let go before the others may take it (ttl/5).
type times struct{ ttl, tick, margin time.Duration }

func timesOf(ttl time.Duration) times { return times{ttl: ttl, tick: ttl / 3, margin: ttl / 5} }

// tenure is this replica's holding of a lease: its acquisition's id and when it was made.
type tenure struct {
	id    string
	since time.Time
}

// attempt is an acquisition sent without an answer; if the bucket shows it, it was applied.
type attempt struct {
	id   string
	sent time.Time
}

// announcement is this replica's record in the bucket: whether it must be written again (the
// controllers changed, or the last write failed), and the revision of the last one answered.
type announcement struct {
	pending bool
	rev     uint64
	at      time.Time // when it was answered
}

// table is the lease table of one replica; the coordinator's mutex guards it.
type table struct {
	self string
	times
	view        view
	controllers []string           // configured here; sorted, unique
	held        map[string]tenure  // by controller
	releasing   map[string]bool    // let go, its controller not yet stopped: not acquired again
	attempts    map[string]attempt // by key: acquisitions whose reply was lost
	joined      time.Time          // the first announcement was sent (see plan)
	announced   announcement
}

func newTable(self string, ttl time.Duration, controllers []string) table {
	return table{self: self, times: timesOf(ttl), view: view{entries: map[string]*entry{}},
		controllers: normalize(controllers), held: map[string]tenure{}, releasing: map[string]bool{},
		attempts: map[string]attempt{}}
}

// configure replaces the controllers this replica is configured with; they are announced next.
func (t *table) configure(names []string) {
	t.controllers = normalize(names)
	t.announced.pending = true
}

// took records a lease this replica acquired (or adopted).
func (t *table) took(controller string, h tenure) { t.held[controller] = h }

// letGo records that this replica gave up a lease it held; the controller is not acquired again
// until released says it has stopped. It reports whether the lease was held.
func (t *table) letGo(controller string) bool {
	if _, ok := t.held[controller]; !ok {
		return false
	}
	delete(t.held, controller)
	t.releasing[controller] = true
	return true
}

// released records that a controller let go has stopped (and its lease was deleted).
func (t *table) released(controller string) { delete(t.releasing, controller) }

// heard records the answer to an announcement, written at rev.
func (t *table) heard(rev uint64, now time.Time) {
	if rev > t.announced.rev {
		t.announced.rev, t.announced.at = rev, now
	}
}

// watchBehind says whether the watch has not delivered our own announcement a renew period
// after it was answered: the view would otherwise go stale silently.
func (t *table) watchBehind(now time.Time) bool {
	a := t.announced
	return a.rev != 0 && now.Sub(a.at) >= t.tick && t.view.maxRev < a.rev
}

// leaseValue is the record of this replica's lease of controller, renewed at now.
func (t *table) leaseValue(controller string, h tenure, now time.Time) []byte {
	b, _ := json.Marshal(leaseRecord{Instance: t.self, Controller: controller, ID: h.id,
		Since: h.since, Renewed: now, TTL: t.ttl.String()})
	return b
}

// handOverDone returns the hand-over record in flight when the controller it names is held
// here, and its entry: the receiver deletes it so that the next one may move.
func (t *table) handOverDone(now time.Time) (*handOverRecord, *entry) {
	r, e := t.view.handOver(now, t.ttl)
	if r == nil {
		return nil, nil
	}
	if _, ok := t.held[r.Controller]; !ok {
		return nil, nil
	}
	return r, e
}

// ending is what becomes of a lease this replica holds.
type ending int

const (
	keeps   ending = iota // held (also fenced, having run out, while a renewal may regain it)
	lost                  // another replica took the key: let go, the key left alone
	expired               // ran out a lease time ago, or ended by its own clock: let go, the key deleted
)

// ends judges a held lease at now from what its fence says: whether another replica took it,
// when it ran out (zero while it has not), whether its own clock ended it. A lease that ran out
// is fenced until a renewal regains it, for a lease time at most.
func (t *table) ends(taken bool, ranOutAt time.Time, ended bool, now time.Time) ending {
	switch {
	case taken:
		return lost
	case !ranOutAt.IsZero() && (now.Sub(ranOutAt) >= t.ttl || ended):
		return expired
	}
	return keeps
}

// round is what one look at the table decided.
type round struct {
	acquire  []acquisition
	adopt    []leaseGrant // acquisitions whose reply was lost
	removed  []string     // held, no longer configured
	handOver string       // the controller to hand over ("": none)
	desired  map[string]string
	marker   *entry    // the hand-over record as read
	next     time.Time // the next instant a judgement changes by time alone
}

// acquisition is a free lease to take, written over its state as read (e: nil when absent).
type acquisition struct {
	controller string
	e          *entry
}

// plan decides a round at now: which leases to adopt, acquire and drop, and the one controller
// to hand over.
func (t *table) plan(now time.Time) round {
	live := t.view.liveInstances(now, t.ttl)
	live[t.self] = &instanceRecord{Instance: t.self, Controllers: t.controllers}
	eligible := make(map[string][]string, len(live))
	for id, r := range live {
		eligible[id] = r.Controllers
	}
	var r round
	held, since := t.holders(live, now)
	r.desired = assignSince(eligible, held, since)
	var inFlight *handOverRecord
	inFlight, r.marker = t.view.handOver(now, t.ttl)
	// The controller being handed over goes to the replica the record names while it is live,
	// whatever our view says of who should have it: the mover's view and ours may differ (a
	// replica it had not seen yet), and a third replica taking it leaves the receiver short.
	if inFlight != nil && live[inFlight.To] != nil && r.desired[inFlight.Controller] != "" {
		r.desired[inFlight.Controller] = inFlight.To
	}
	// For a renew period after it announced itself a replica does not take a lease that was
	// free before it came: replicas started together (a Deployment's pods) have announced
	// themselves by then, and each takes its share directly, rather than the first up taking
	// every free lease alone and starting every controller at once (its first renewals then
	// came too late) only to hand most of them over. A lease freed since (let go by a replica
	// stopped in a rolling restart, run out) is taken at once, and so is one handed to us.
	warming := now.Sub(t.joined) < t.tick
	mine := map[string]bool{}
	anyFree := false
	for _, ct := range t.controllers {
		mine[ct] = true
		handed := inFlight != nil && inFlight.Controller == ct && inFlight.To == t.self
		if _, h := t.held[ct]; !h && !t.releasing[ct] && t.planFree(&r, ct, now, warming && !handed) {
			anyFree = true
		}
	}
	for ct := range t.held {
		if !mine[ct] {
			r.removed = append(r.removed, ct)
		}
	}
	if inFlight == nil && !anyFree && len(r.acquire) == 0 && len(r.adopt) == 0 {
		r.handOver = t.mover(r.desired, live, now)
	}
	r.next = t.view.nextExpiry(now, t.ttl)
	return r
}

// planFree plans a configured controller this replica does not hold: adopt it when our
// acquisition's reply was lost, acquire it when its lease is free and it should be ours (when
// warming, only if it became free after this replica joined), or has been free for a whole
// lease. It reports whether the lease is free.
func (t *table) planFree(r *round, ct string, now time.Time, warming bool) bool {
	key := leaseKey(ct)
	st := t.view.lease(key, now, t.ttl)
	if a, ok := t.attempts[key]; ok {
		// An acquisition whose reply was lost shows up in the bucket: it is ours since it was sent.
		if !st.free && st.e.lease.ID == a.id && a.sent.Add(t.ttl-t.margin).After(now) {
			r.adopt = append(r.adopt, leaseGrant{ct, key, a.id, st.e.lease.Since, st.e.rev, a.sent.Add(t.ttl - t.margin)})
			delete(t.attempts, key)
			return false
		}
		if !st.free && st.e.lease.ID != a.id || now.Sub(a.sent) > t.ttl {
			delete(t.attempts, key)
		}
	}
	if !st.free {
		return false
	}
	may := !warming || st.freeSince.After(t.joined)
	if may && r.desired[ct] == t.self || now.Sub(st.freeSince) >= t.ttl {
		r.acquire = append(r.acquire, acquisition{ct, st.e})
	}
	return true
}

// holders maps each controller some live instance announces to the live instance tenure its
// lease, as far as this replica knows, and to when that holder acquired it (its record's
// since, Unix nanoseconds). assign lets them keep it, longest held first, so that when a
// replica leaves only its controllers move.
func (t *table) holders(live map[string]*instanceRecord, now time.Time) (map[string]string, map[string]int64) {
	out, since := map[string]string{}, map[string]int64{}
	for _, r := range live {
		for _, ct := range r.Controllers {
			if h, ok := t.held[ct]; ok {
				out[ct], since[ct] = t.self, h.since.UnixNano()
			} else if st := t.view.lease(leaseKey(ct), now, t.ttl); !st.free && live[st.holder] != nil {
				out[ct], since[ct] = st.holder, st.e.lease.Since.UnixNano()
			}
		}
	}
	return out, since
}

// mover picks the one controller to hand over now: among those held by a live replica that is
// not their desired owner, the first by holder and name. Every replica computes the same, so
// controllers move one at a time. It returns the controller when it is this replica's to move.
func (t *table) mover(desired map[string]string, live map[string]*instanceRecord, now time.Time) string {
	var bestHolder, best string
	for ct, want := range desired {
		holder := ""
		if _, ok := t.held[ct]; ok {
			holder = t.self
		} else if st := t.view.lease(leaseKey(ct), now, t.ttl); !st.free {
			holder = st.holder
		}
		if holder == "" {
			// A controller without an owner (one just handed over, not yet taken): hand over
			// nothing else until it has one, or two would be unowned at once.
			return ""
		}
		if holder == want || live[holder] == nil {
			continue
		}
		if best == "" || holder < bestHolder || holder == bestHolder && ct < best {
			bestHolder, best = holder, ct
		}
	}
	if _, ok := t.held[best]; bestHolder != t.self || !ok {
		return ""
	}
	return best
}
