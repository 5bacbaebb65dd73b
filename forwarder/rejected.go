package forwarder

// Events that could not be published as the controller sent them (DESIGN §8): each is published
// in a bounded form or to the controller's invalid subject (publish.go, decode.go), and when its
// message is built it is counted by reason, logged once at warn with its id and listed on the
// status page. A message built again (its publish failed or was not acknowledged, and the journal
// is read again) is not counted again: the last rejectedMemory events are remembered. Nothing here
// ever stops forwarding.

import (
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

// RejectedEvent is one event that went out in another form than the controller sent it.
type RejectedEvent struct {
	ID      string // the event's id (for an event without one: the id given to it, invalid-…)
	Reason  string // too_large, long_token, no_id, bad_created, not_an_object
	Subject string // where it was published
	Size    int    // the body's size as read, in bytes
	At      time.Time
}

// maxLoggedIDBytes bounds an id in a log line or on the status page (an id is the controller's
// text too).
const maxLoggedIDBytes = 128

// rejectedMemory is how many rejected events are remembered so as to count each once.
const rejectedMemory = 256

// rejections counts the events published in another form by reason and lists the last of them
// (Status.RecentRejected); seen holds the last rejectedMemory events counted (keys, oldest
// first). Guarded by the observer's mutex.
type rejections struct {
	counts map[string]uint64
	recent ring[RejectedEvent]
	seen   map[string]struct{}
	keys   []string
}

// rejectedEvent counts, logs and lists one event going out in another form than the one read.
func (o *observer) rejectedEvent(e *veil.Event, m *nats.Msg, reason string) {
	id := e.ID
	if len(id) > maxLoggedIDBytes {
		id = cutHashed(id, id, maxLoggedIDBytes)
	}
	r := RejectedEvent{ID: id, Reason: reason, Subject: boundAttr(m.Subject), Size: len(e.Raw), At: time.Now()}
	key := e.ID + "\x00" + e.Created.UTC().Format(time.RFC3339Nano)
	o.mu.Lock()
	rj := &o.rejected
	if _, seen := rj.seen[key]; seen {
		o.mu.Unlock()
		return
	}
	if len(rj.keys) >= rejectedMemory {
		delete(rj.seen, rj.keys[0])
		rj.keys = rj.keys[1:]
	}
	rj.seen[key] = struct{}{}
	rj.keys = append(rj.keys, key)
	rj.counts[reason]++
	rj.recent.add(r)
	o.mu.Unlock()
	level.Warn(o.logger).Log("msg", "event cannot be published as the controller sent it: publishing it in a bounded form", "id", r.ID, "reason", reason,
		"created", m.Header.Get("ce-time"), "subject", r.Subject, "size", r.Size, "cut_fields", m.Header.Get(hdrCutFields))
}
