// This file holds the lease table's view of the bucket: the records of leases and instances,
// kept up to date by a watch, each with the local time its revision was first seen.

package ha

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keys in the bucket: leases.<controller>, instances.<instance>, and handover while a replica
// hands a controller to another.
const (
	leasePrefix    = "leases."
	instancePrefix = "instances."
	handOverKey    = "handover"
)

// leaseRecord is the value of leases.<controller>.
type leaseRecord struct {
	Instance   string    `json:"instance"`
	Controller string    `json:"controller"`
	ID         string    `json:"id"`      // one acquisition: tells a write of ours whose reply was lost
	Since      time.Time `json:"since"`   // acquisition, holder's wall clock (shown; compared only with the same holder's: assignSince)
	Renewed    time.Time `json:"renewed"` // last renewal, holder's wall clock (shown, never compared)
	TTL        string    `json:"ttl"`
}

// instanceRecord is the value of instances.<instance>: a replica announcing itself and the
// controllers it is configured with.
type instanceRecord struct {
	Instance    string    `json:"instance"`
	Nonce       string    `json:"nonce"` // one process: tells two replicas configured with the same instance
	Started     time.Time `json:"started"`
	Renewed     time.Time `json:"renewed"`
	Controllers []string  `json:"controllers"`
}

// handOverRecord is the value of handover: a replica letting go of a controller for another to
// take. Only one can exist, so controllers move one at a time whatever each replica's view says.
type handOverRecord struct {
	Controller string    `json:"controller"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	At         time.Time `json:"at"` // sender's wall clock (shown, never compared)
}

// entry is the latest revision of one key as seen here.
type entry struct {
	rev      uint64
	deleted  bool
	observed time.Time // monotonic: when this revision was first seen here
	lease    *leaseRecord
	inst     *instanceRecord
	handOver *handOverRecord
}

// view is every key of the bucket as last seen; the coordinator's mutex guards it.
type view struct {
	entries  map[string]*entry
	synced   bool      // the watch delivered the bucket's content
	syncedAt time.Time // absent keys count as free since then
	maxRev   uint64    // highest revision seen through the watch
}

// apply records a revision of key unless a newer one is known; it reports whether it did.
func (v *view) apply(key string, rev uint64, op jetstream.KeyValueOp, value []byte, now time.Time) bool {
	if e, ok := v.entries[key]; ok && e.rev >= rev {
		return false
	}
	e := &entry{rev: rev, observed: now, deleted: op != jetstream.KeyValuePut}
	if !e.deleted {
		switch {
		case strings.HasPrefix(key, leasePrefix):
			var r leaseRecord
			if json.Unmarshal(value, &r) != nil || r.Instance == "" {
				r = leaseRecord{Instance: "?"} // held by someone unknown: wait for it to expire
			}
			e.lease = &r
		case strings.HasPrefix(key, instancePrefix):
			var r instanceRecord
			if json.Unmarshal(value, &r) == nil && r.Instance != "" {
				e.inst = &r
			}
		case key == handOverKey:
			var r handOverRecord
			_ = json.Unmarshal(value, &r) // unreadable: still a hand-over in flight until it expires
			e.handOver = &r
		}
	}
	v.entries[key] = e
	return true
}

// forget drops a key a read found absent (deleted, or removed by the bucket's max age, which
// the watch does not report), unless the view has learnt a revision of it newer than known, the
// one it held when the read was sent: the watch may deliver a write made after the read before
// the read's answer comes, and that write stands.
// A delete marker stays: absent is what it says already, and its revision is what the next
// write goes over. It reports whether the view changed.
func (v *view) forget(key string, known uint64) bool {
	e, ok := v.entries[key]
	if !ok || e.deleted || e.rev > known {
		return false
	}
	delete(v.entries, key)
	return true
}

// rev is the revision of key the view holds (0: none).
func (v *view) rev(key string) uint64 {
	if e, ok := v.entries[key]; ok {
		return e.rev
	}
	return 0
}

// leaseState describes leases.<controller> at now for a replica with lease time ttl.
type leaseState struct {
	e         *entry    // nil when absent
	free      bool      // absent, deleted, or unchanged for ttl
	freeSince time.Time // when it became free (monotonic)
	holder    string    // instance holding it while not free
}

func (v *view) lease(key string, now time.Time, ttl time.Duration) leaseState {
	e, ok := v.entries[key]
	switch {
	case !ok:
		return leaseState{free: true, freeSince: v.syncedAt}
	case e.deleted:
		return leaseState{e: e, free: true, freeSince: e.observed}
	case now.Sub(e.observed) >= ttl:
		return leaseState{e: e, free: true, freeSince: e.observed.Add(ttl)}
	}
	return leaseState{e: e, holder: e.lease.Instance}
}

// handOver returns the hand-over in flight at now (nil when none: absent, deleted, or left
// unchanged for ttl by a replica that died or whose receiver never came) and its entry.
func (v *view) handOver(now time.Time, ttl time.Duration) (*handOverRecord, *entry) {
	e, ok := v.entries[handOverKey]
	if !ok || e.deleted || e.handOver == nil || now.Sub(e.observed) >= ttl {
		return nil, e
	}
	return e.handOver, e
}

// nextExpiry is the first instant after now at which a judgement of reconcile changes by time
// alone: a lease becomes free, a free lease has waited ttl for its desired owner, an instance
// stops being live, a hand-over lapses. Zero when none is ahead.
func (v *view) nextExpiry(now time.Time, ttl time.Duration) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if v.synced {
		consider(v.syncedAt.Add(ttl))
	}
	for _, e := range v.entries {
		consider(e.observed.Add(ttl))
		if e.lease != nil && !e.deleted {
			consider(e.observed.Add(2 * ttl)) // free at +ttl, anyone's a ttl later
		}
	}
	return next
}

// liveInstances maps each instance whose record changed within ttl to its controllers.
func (v *view) liveInstances(now time.Time, ttl time.Duration) map[string]*instanceRecord {
	out := map[string]*instanceRecord{}
	for k, e := range v.entries {
		if strings.HasPrefix(k, instancePrefix) && e.inst != nil && !e.deleted && now.Sub(e.observed) < ttl {
			out[e.inst.Instance] = e.inst
		}
	}
	return out
}

// keyToken makes s a valid key token ([A-Za-z0-9_-]); a changed name gets a hash of the
// original so that two names cannot map to one key.
func keyToken(s string) string {
	var b strings.Builder
	changed := s == ""
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	if changed {
		h := fnv.New32a()
		h.Write([]byte(s))
		b.WriteString("-" + strconv.FormatUint(uint64(h.Sum32()), 16))
	}
	return b.String()
}
