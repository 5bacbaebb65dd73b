// This file holds what the observer says of leases that ran out before a renewal was answered:
// counted per controller, said once per run of them, and the run's end said when renewals have
// kept up for a while.

package ha

import (
	"slices"
	"strings"
	"time"

	"github.com/go-kit/log/level"
)

// lapseQuiet is how many lease times without a lapse end a run of them.
const lapseQuiet = 5

// lapseNamed bounds the controllers a warning names: 500 lapsing at once make one line.
const lapseNamed = 10

// lapseRemind repeats the warning while lapses go on.
const lapseRemind = 10 * time.Minute

// lapsed counts leases that ran out here before a renewal was answered. Each fences its
// controller (nothing published) until a renewal regains the lease; one that no renewal regains
// within lease_ttl ends, and wherever it is acquired next the controller starts from scratch
// (its inventory listed in full, its bucket read back). On a replica or a NATS too slow for
// lease_ttl they come in runs, which the first of says at warn.
func (o *observer) lapsed(leases []*Lease, ttl time.Duration) {
	if len(leases) == 0 {
		return
	}
	now := time.Now()
	names := make([]string, 0, len(leases))
	o.mu.Lock()
	for _, l := range leases {
		o.lapses[l.controller] += uint64(l.lapses.Swap(0))
		names = append(names, l.controller)
	}
	o.lastLapse = now
	o.mu.Unlock()
	slices.Sort(names)
	o.lapse.Fail(now, level.Warn, "leases ran out before their renewals were answered: NATS or this replica is too slow for ha.lease_ttl; these controllers publish nothing until a renewal is answered, and start again from scratch if none is within lease_ttl",
		nil, "leases", len(names), "controllers", strings.Join(names[:min(len(names), lapseNamed)], ","), "lease_ttl", ttl)
}

// renewedInTime is told of a round that renewed every held lease (held: there were some): it
// ends a run of lapses once leases are held and none ran out for lapseQuiet lease times.
func (o *observer) renewedInTime(now time.Time, held bool, ttl time.Duration) {
	o.mu.Lock()
	last := o.lastLapse
	o.mu.Unlock()
	if held && !last.IsZero() && now.Sub(last) >= lapseQuiet*ttl {
		o.lapse.Recover(now, "leases renewed in time again", "quiet_for", now.Sub(last).Round(time.Second))
	}
}
