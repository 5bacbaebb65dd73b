package forwarder

// This file makes the stream the position: the headers each message carries so that the
// forwarder can resume from its controller's newest message alone, reading that message from the
// stream leader, and reconciling it with the stored position (the fallback).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Headers that let the forwarder resume from one message (README: "Headers").
const (
	// hdrCreated is the event's created instant, RFC 3339 with nanoseconds in UTC.
	hdrCreated = "Veil-Created"
	// hdrCreatedIDs is a JSON array of the ids published at that instant up to and including
	// this one: several events may share an instant.
	hdrCreatedIDs = "Veil-Created-Ids"
	// hdrOrder is the order the journal was read in (oldest_first, newest_first).
	hdrOrder = "Veil-Journal-Order"
	// hdrFuture lists the events published ahead of their time that the position holds
	// (position.Future: a JSON array of {id, created}), when there are at most maxHeaderFuture.
	hdrFuture = "Veil-Future"
	// hdrFutureCount is how many events published ahead of their time the position holds, on
	// every message whose position holds any; hdrFutureFrom a stream sequence that all their
	// messages follow: the ones hdrFuture does not list are read back from there (completeFuture).
	hdrFutureCount = "Veil-Future-Count"
	// hdrOdd lists the last maxHeaderOdd events published that could not be read as events
	// (position.Odd: a JSON array of ids), when there are any.
	hdrOdd        = "Veil-Odd-Ids"
	hdrFutureFrom = "Veil-Future-After-Seq"
	// hdrCreatedCount, on a message whose instant holds more ids than hdrCreatedIDs lists (the
	// last maxHeaderIDs of them), is how many there are.
	hdrCreatedCount = "Veil-Created-Count"
	// hdrInstantFrom, on a message that shares its instant with an earlier one, is a stream
	// sequence before the first message of that instant: the ids not listed are read back from
	// the messages after it (instantIDs).
	hdrInstantFrom = "Veil-Created-After-Seq"
)

// maxHeaderIDs bounds the ids a message lists: the headers stay a few KiB, whatever the number of
// events at one instant (thousands at once on a boot storm). maxHeaderFuture bounds the events
// published ahead of their time a message lists, whatever their number.
const (
	maxHeaderIDs    = 32
	maxHeaderFuture = 8
	maxHeaderOdd    = 8
)

// Expectation headers the stream leader enforces (nats-server 2.11+).
const (
	hdrExpectSubjSeq  = "Nats-Expected-Last-Subject-Sequence"
	hdrExpectSubjFilt = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// positionHeaders adds what resumes from this message: its created and the ids published at that
// instant (pos after the event was added to it).
func positionHeaders(h nats.Header, pos *position, order direction) {
	list := pos.IDs
	if len(list) > maxHeaderIDs {
		list = list[len(list)-maxHeaderIDs:]
		h[hdrCreatedCount] = []string{strconv.Itoa(len(pos.IDs))}
	}
	if n := len(pos.Odd); n > 0 {
		h[hdrOdd] = []string{idList(pos.Odd[max(0, n-maxHeaderOdd):])}
	}
	if n := len(pos.Future); n > 0 {
		h[hdrFutureCount] = []string{strconv.Itoa(n)}
		if n <= maxHeaderFuture {
			type listed struct {
				ID      string    `json:"id"`
				Created time.Time `json:"created"`
			}
			l := make([]listed, n)
			for i, a := range pos.Future {
				l[i] = listed{a.ID, a.Created}
			}
			ahead, _ := json.Marshal(l)
			h[hdrFuture] = []string{string(ahead)}
		}
		if after := pos.Future[0].After; after != afterPending {
			h[hdrFutureFrom] = []string{strconv.FormatUint(after, 10)}
		}
	}
	// One backing array for the three values: this runs for every event of a catch-up.
	v := [...]string{pos.Created.UTC().Format(time.RFC3339Nano), idList(list), order.String()}
	vals := v[:]
	h[hdrCreated], h[hdrCreatedIDs], h[hdrOrder] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
}

// idList is the JSON array of ids, as json.Marshal writes it: built directly when every id is
// printable ASCII that JSON writes as it is (an event id is a uuid), else by json.Marshal.
func idList(ids []string) string {
	n := 2
	for _, id := range ids {
		for i := 0; i < len(id); i++ {
			if c := id[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				b, _ := json.Marshal(ids)
				return string(b)
			}
		}
		n += len(id) + 3
	}
	switch {
	case ids == nil:
		return "null"
	case len(ids) == 0:
		return "[]"
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, id...)
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// streamPosition is the position a stored message says: from its headers, or, for a message
// published before they existed, from the event in its body (its created and id alone).
func streamPosition(h nats.Header, body []byte) (position, error) {
	if c := h.Get(hdrCreated); c != "" {
		t, err := time.Parse(time.RFC3339Nano, c)
		if err != nil {
			return position{}, fmt.Errorf("header %s: %w", hdrCreated, err)
		}
		var ids []string
		// No ids: nothing dated at or before the clock was published yet, only events dated
		// ahead of it (hdrFuture).
		if err := json.Unmarshal([]byte(h.Get(hdrCreatedIDs)), &ids); err != nil || len(ids) == 0 && h.Get(hdrFutureCount) == "" {
			return position{}, fmt.Errorf("header %s: not a list of ids", hdrCreatedIDs)
		}
		p := position{Created: t, IDs: ids, Known: true}
		if a := h.Get(hdrFuture); a != "" {
			if err := json.Unmarshal([]byte(a), &p.Future); err != nil {
				return position{}, fmt.Errorf("header %s: %w", hdrFuture, err)
			}
		}
		if o := h.Get(hdrOdd); o != "" {
			if err := json.Unmarshal([]byte(o), &p.Odd); err != nil {
				return position{}, fmt.Errorf("header %s: %w", hdrOdd, err)
			}
		}
		// Without hdrFutureFrom (a message of an older version) the events listed may be
		// anywhere in the stream: 0.
		from, _ := strconv.ParseUint(h.Get(hdrFutureFrom), 10, 64)
		for i := range p.Future {
			p.Future[i].After = from
		}
		return p, nil
	}
	var e eventKey
	if err := decodeEventKey(body, &e); err != nil {
		return position{}, fmt.Errorf("body of the newest message: %w", err)
	}
	return position{Created: e.created, IDs: []string{e.id}, Known: true}, nil
}

type eventKey struct {
	id      string
	created time.Time
}

func decodeEventKey(body []byte, k *eventKey) error {
	var e veil.Event
	if err := decodeEvent(body, &e); err != nil {
		return err
	}
	if e.ID == "" || e.Created.IsZero() {
		return errors.New("no id or created")
	}
	k.id, k.created = e.ID, e.Created.Time
	return nil
}

// instant is the created instant of the newest message published or being published, and a
// stream sequence before the first message of it (hdrInstantFrom).
type instant struct {
	known   bool
	created time.Time
	from    uint64
}

// promotedFrom says whether p is q moved up by promote alone: q's events published ahead of
// their time, the clock having passed some, are p's instant and later. The stream's newest
// message then holds q while the forwarder holds p, and neither is behind the other.
func (p position) promotedFrom(q position) bool {
	if !p.Known || !q.Known || !p.Created.After(q.Created) {
		return false
	}
	for _, id := range p.IDs {
		if !q.isFuture(id) {
			return false
		}
	}
	for _, a := range p.Future {
		if !q.isFuture(a.ID) {
			return false
		}
	}
	return true
}

// compare orders two positions: -1 when p is before q, 1 after, 0 the same. At one instant the
// position holding fewer of the ids published then is the earlier one.
func (p position) compare(q position) int {
	switch {
	case !p.Known && !q.Known:
		return 0
	case !p.Known:
		return -1
	case !q.Known:
		return 1
	}
	if c := p.Created.Compare(q.Created); c != 0 {
		return c
	}
	pq, qp := containsAll(q.IDs, p.IDs), containsAll(p.IDs, q.IDs)
	switch {
	case pq && qp:
		// One instant, one tie: the position holding more of the events published ahead of
		// their time is the later one.
		pa, qa := p.aheadOf(&q), q.aheadOf(&p)
		switch {
		case pa && !qa:
			return 1
		case qa && !pa:
			return -1
		}
		return 0
	case pq:
		return -1
	case qp:
		return 1
	}
	return 0 // different ties of one instant: neither is provably ahead
}

// aheadOf says whether p holds an event published ahead of its time that q does not.
func (p *position) aheadOf(q *position) bool {
	for _, a := range p.Future {
		if !q.isFuture(a.ID) {
			return true
		}
	}
	return false
}

func containsAll(set, sub []string) bool {
	for _, x := range sub {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// Rewind is one time the stream held less of this controller than the stored position: the
// events in between were published again from the journal.
type Rewind struct {
	At   time.Time // when it was noticed (zero: never)
	From time.Time // created of the stored position
	To   time.Time // created of the stream's newest event of this controller (zero: none)
}

// syncFromStream reads the controller's newest message on the stream and makes it the position:
// at start, after a reconnect and after the stream refused an expectation or a publish ended
// uncertain. A stream that holds nothing of this controller (new, or aged out) leaves the stored
// position in force.
func (fw *Forwarder) syncFromStream(ctx context.Context) error {
	out := &fw.out
	c := out.stream.conn
	if out.sr == nil {
		fw.mu.Lock()
		out.needSync, out.epoch = false, c.Generation()
		fw.mu.Unlock()
		return nil
	}
	h, err := out.head(ctx)
	if err != nil {
		return err
	}
	m, sp := h.msg, h.pos
	fw.mu.Lock()
	out.inst = instant{known: m != nil, created: sp.Created, from: h.from}
	cur := fw.pos
	var rewound *Rewind
	changed := false
	switch {
	case m == nil:
		out.seq = 0
	default:
		c := sp.compare(cur)
		if cur.promotedFrom(sp) {
			c = 0 // the stream's newest message is from before a promotion: ours is as far
		}
		if c < 0 && out.doubt(m.seq, fw.clock()) {
			fw.mu.Unlock()
			return fmt.Errorf("%w: the stream's newest message of this controller, %d, holds less than the position (read again for %s before it counts as messages lost by NATS)", errStaleReplica, m.seq, staleGrace)
		}
		out.seq = m.seq
		if c != 0 || !cur.Known {
			if c < 0 && cur.Known && !cur.FromStart {
				rewound = &Rewind{At: time.Now(), From: cur.Created, To: sp.Created}
				fw.obs.rewound(*rewound)
				if cur.compare(out.republishUntil) > 0 {
					out.republishUntil = cur.clone()
				}
			}
			if c >= 0 {
				// The stream is not behind the stored position (a save the process did not live
				// to make, or none yet past events dated ahead): the events that do not decode
				// which the stored position knows were published too, and the stream's headers
				// list only the last few.
				sp.Odd = mergeOdd(cur.Odd, sp.Odd)
			}
			fw.pos, changed = sp, true
		}
		if o := parseDirection(m.header.Get(hdrOrder)); fw.reader.auto && o != unknownOrder {
			fw.reader.order.CompareAndSwap(int64(unknownOrder), int64(o))
		}
	}
	out.needSync, out.behind.seq = false, 0
	out.epoch = c.Generation()
	pos, seq := fw.pos.clone(), out.seq
	fw.mu.Unlock()
	if rewound != nil {
		level.Warn(fw.logger).Log("msg", "the stream holds less of this controller than the stored position (messages lost by NATS): publishing the events in between again from the journal",
			"stored", rewound.From, "stream", rewound.To, "stream_seq", seq)
	} else if changed {
		level.Info(fw.logger).Log("msg", "position taken from the stream", "created", pos.Created, "stream_seq", seq)
	}
	if changed {
		// Kept in step: the fallback for a stream that will hold nothing of this controller.
		return fw.savePosition(ctx, pos)
	}
	return nil
}

func parseDirection(s string) direction {
	switch s {
	case "oldest_first":
		return oldestFirst
	case "newest_first":
		return newestFirst
	}
	return unknownOrder
}

// storedMsg is a message read back from the stream.
type storedMsg struct {
	seq    uint64
	header nats.Header
	data   []byte
}

// streamReader reads a controller's messages back from the stream (nil with core NATS).
type streamReader interface {
	// last is the controller's newest message; nil when the stream holds none.
	last(ctx context.Context) (*storedMsg, error)
	// from is the controller's first message at or after seq; nil when there is none.
	from(ctx context.Context, seq uint64) (*storedMsg, error)
}

// leaderReader reads through the stream leader's message get API.
type leaderReader struct {
	s      *Stream
	filter string // the controller's subjects
}

func (r leaderReader) last(ctx context.Context) (*storedMsg, error) {
	return lastMessage(ctx, r.s.conn, r.s.cfg.JetStream.PublishTimeout, r.s.cfg.JetStream.Stream, r.filter)
}

func (r leaderReader) from(ctx context.Context, seq uint64) (*storedMsg, error) {
	return getMessage(ctx, r.s.conn, r.s.cfg.JetStream.PublishTimeout, r.s.cfg.JetStream.Stream, msgGet{Seq: seq, NextBySubject: r.filter})
}

// lastMessage reads the newest message matching filter through the stream leader's message get
// API (not a direct get, which a lagging follower may answer); nil when there is none.
func lastMessage(ctx context.Context, c *natsconn.Conn, timeout time.Duration, stream, filter string) (*storedMsg, error) {
	return getMessage(ctx, c, timeout, stream, msgGet{LastBySubject: filter})
}

// msgGet is a request of the stream's message get API.
type msgGet struct {
	Seq           uint64 `json:"seq,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
}

// getMessage reads one message through the stream leader's message get API; nil when there is
// none.
func getMessage(ctx context.Context, c *natsconn.Conn, timeout time.Duration, stream string, get msgGet) (*storedMsg, error) {
	req, _ := json.Marshal(get)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.NATS().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var r struct {
		Error   *apiError `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("couldn't decode the stream's answer: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == 10037 { // no message found
			return nil, nil
		}
		return nil, r.Error
	}
	if r.Message == nil {
		return nil, errors.New("the stream's answer holds no message")
	}
	m := &storedMsg{seq: r.Message.Seq, data: r.Message.Data}
	if len(r.Message.Header) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("couldn't decode the headers of stream message %d: %w", m.seq, err)
		}
	}
	return m, nil
}
