package forwarder

// The stream side of a forwarder: the controller's part of the events stream, how batches are
// published to it and its messages read back, and where it stands for the next publish (the
// sequence it expects, whether the position must be read from the stream first, the instant
// being published, the rewind being made up for). Reading the position back from the stream's
// headers is streampos.go; publishing batches, pipeline.go and publish.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"
)

// streamSide is the controller's part of the stream. pub, sr, stream, filter, idPrefix and logger
// are set once; the rest is guarded by fw.mu, with the position it must agree with.
type streamSide struct {
	stream   *Stream // shared with the other forwarders on its connection
	pub      publisher
	sr       streamReader // nil with core NATS
	filter   string       // <prefix>.<controller>.>: every message of this controller's events
	idPrefix string       // <controller>.: what the Nats-Msg-Id of an event puts before its id
	logger   log.Logger

	// seq is the stream sequence of the controller's newest message (0: none), what the next
	// publish expects; epoch the connection's reconnect count when the position was last read
	// from the stream, needSync that it must be read again before publishing.
	seq      uint64
	epoch    uint64
	needSync bool
	// inst is the instant of the newest message published: the sequence its messages carry in
	// hdrInstantFrom.
	inst instant
	// republishUntil is the position a rewind went back from (unknown: none pending): an event
	// published at or before it is published again, counted as republished.
	republishUntil position
	// serialLeft is how many events are still to be published one at a time after a failure
	// (pipeline.go).
	serialLeft int
	// behind is a newest message that holds less than the position, and when it was first
	// answered (doubt).
	behind struct {
		seq   uint64
		since time.Time
	}
}

// staleGrace is how long the stream must answer a newest message that holds less than the
// position before that is taken for messages lost by NATS rather than a node not caught up. A
// node that led the stream before a partition hears of the new leader within a heartbeat or two of
// the routes coming back; a server that lost acknowledged messages (a power loss) says the same
// for good.
const staleGrace = 5 * time.Second

// doubt says whether the controller's newest message the stream answered, seq, which holds less
// than the position (the forwarder's own, or the stored one at a start), is to be read again
// rather than taken for a rewind: it has not been answered for staleGrace yet. A forwarder just
// started cannot tell a stale node by the sequence it was acknowledged, so every rewind waits.
// fw.mu is held.
func (s *streamSide) doubt(seq uint64, now time.Time) bool {
	if s.behind.seq != seq {
		s.behind.seq, s.behind.since = seq, now
	}
	return now.Sub(s.behind.since) < staleGrace
}

// init sets the stream side up for controller on stream: JetStream, with an expectation on each
// publish and the position read back from the stream, or core NATS.
func (s *streamSide) init(stream *Stream, controller string, logger log.Logger) {
	s.stream, s.logger, s.needSync = stream, logger, true
	s.filter = stream.cfg.SubjectPrefix + "." + sanitizeToken(controller) + ".>"
	s.idPrefix = controller + "."
	if stream.js != nil {
		s.pub = &jsPublisher{stream: stream, filter: s.filter, timeout: stream.cfg.JetStream.PublishTimeout}
		s.sr = leaderReader{s: stream, filter: s.filter}
	} else {
		s.pub = &corePublisher{nc: stream.conn.NATS(), timeout: stream.cfg.JetStream.PublishTimeout}
	}
}

// setUpError is a stream or position store set-up that failed with NATS connected.
type setUpError struct{ err error }

func (e *setUpError) Error() string { return e.err.Error() }
func (e *setUpError) Unwrap() error { return e.err }

// check makes sure events can be published: NATS connected, the stream set up; it says why not.
func (s *streamSide) check(ctx context.Context) error {
	c := s.stream.conn
	if !c.Connected() {
		return c.NotConnected()
	}
	if serr := s.stream.setUp(ctx); serr != nil {
		if c.Connected() {
			return &setUpError{serr}
		}
		return serr
	}
	return nil
}

// mustSync says whether the position must be read from the stream before publishing: at start,
// on a new connection (the server may have lost what it acknowledged), after a refused or
// uncertain publish. fw.mu is held.
func (s *streamSide) mustSync() bool {
	return s.needSync || s.epoch != s.stream.conn.Generation()
}

// streamHead is the controller's newest message on the stream (msg nil: the stream holds none)
// and the position it says, with a sequence before the first message of its instant (from).
type streamHead struct {
	msg  *storedMsg
	pos  position
	from uint64
}

// head reads the controller's newest message and the position it says, completed from the
// messages before it where its headers do not list everything.
func (s *streamSide) head(ctx context.Context) (streamHead, error) {
	m, err := s.sr.last(ctx)
	if err != nil {
		return streamHead{}, fmt.Errorf("couldn't read the position from the stream: %w", err)
	}
	h := streamHead{msg: m}
	if m == nil {
		return h, nil
	}
	if h.pos, err = streamPosition(m.header, m.data); err != nil {
		return h, fmt.Errorf("couldn't read the position from stream message %d: %w", m.seq, err)
	}
	if h.from, err = s.completeInstant(ctx, m, &h.pos); err != nil {
		return h, fmt.Errorf("couldn't read the position from the stream: %w", err)
	}
	if err = s.completeFuture(ctx, m, &h.pos); err != nil {
		return h, fmt.Errorf("couldn't read the position from the stream: %w", err)
	}
	return h, nil
}

// markInstants gives each message of b that shares its instant with an earlier one a stream
// sequence before the first message of that instant (hdrInstantFrom): b.expect, the controller's
// newest sequence before b, for an instant that begins in b. A message whose position holds
// events published ahead of their time that the read took itself gets the sequence before the
// read's first batch, first (hdrFutureFrom: message set it when the oldest of them was published
// before the read). fw.mu is held.
func (s *streamSide) markInstants(b sentBatch, first uint64) {
	for i, m := range b.msgs {
		if _, ahead := m.Header[hdrFutureCount]; ahead && m.Header.Get(hdrFutureFrom) == "" {
			m.Header[hdrFutureFrom] = []string{strconv.FormatUint(first, 10)}
		}
		if b.future[i] {
			continue // its headers give the position's instant, not its own
		}
		expect := b.expect
		c := b.events[i].Created.Time
		if !s.inst.known || !c.Equal(s.inst.created) {
			s.inst = instant{known: true, created: c, from: expect}
		}
		if _, many := m.Header[hdrCreatedCount]; many || strings.Contains(m.Header.Get(hdrCreatedIDs), `","`) {
			m.Header[hdrInstantFrom] = []string{strconv.FormatUint(s.inst.from, 10)}
		}
	}
}

// completeInstant reads back the ids m's headers do not list (its instant holds more than
// maxHeaderIDs) from the controller's messages after the sequence hdrInstantFrom gives, and
// returns that sequence (m.seq-1 when m is the first of its instant). Should the stream hold
// fewer than the count says (a message deleted since), what it holds is used and that is said:
// the duplicate window then guards the few that may go out again.
func (s *streamSide) completeInstant(ctx context.Context, m *storedMsg, sp *position) (uint64, error) {
	from := m.seq - 1
	if f := m.header.Get(hdrInstantFrom); f != "" {
		if v, err := strconv.ParseUint(f, 10, 64); err == nil && v < m.seq {
			from = v
		}
	}
	count, _ := strconv.Atoi(m.header.Get(hdrCreatedCount))
	if count <= len(sp.IDs) {
		return from, nil
	}
	created := m.header.Get(hdrCreated)
	var ids []string
	err := s.walk(ctx, from, m, func(x *storedMsg) {
		if x.header.Get(hdrCreated) == created {
			ids = append(ids, strings.TrimPrefix(x.header.Get(nats.MsgIdHdr), s.idPrefix))
		}
	})
	if err != nil {
		return 0, err
	}
	if len(ids) != count {
		level.Warn(s.logger).Log("msg", "the stream holds fewer messages of the position's instant than its newest message counts: the events not found may be published again (the duplicate window drops them)",
			"created", created, "count", count, "found", len(ids), "stream_seq", m.seq)
		for _, id := range sp.IDs {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	sp.IDs = ids
	return from, nil
}

// completeFuture reads back the events published ahead of their time that m's position holds
// and its headers do not list (more than maxHeaderFuture): the controller's messages after the
// sequence hdrFutureFrom gives, up to m, dated after the position's instant. Should the stream
// hold fewer than the count says (messages deleted since), what it holds is used and that is
// said: those not found may be published again, and the duplicate window drops them.
func (s *streamSide) completeFuture(ctx context.Context, m *storedMsg, sp *position) error {
	count, _ := strconv.Atoi(m.header.Get(hdrFutureCount))
	if count <= len(sp.Future) {
		return nil
	}
	from, _ := strconv.ParseUint(m.header.Get(hdrFutureFrom), 10, 64)
	var ahead []futureEvent
	seen := map[string]bool{}
	err := s.walk(ctx, from, m, func(x *storedMsg) {
		created, err := time.Parse(time.RFC3339Nano, x.header.Get("ce-time"))
		id := strings.TrimPrefix(x.header.Get(nats.MsgIdHdr), s.idPrefix)
		if err != nil || !created.After(sp.Created) || seen[id] {
			return
		}
		seen[id] = true
		ahead = append(ahead, futureEvent{ID: id, Created: created, After: from})
	})
	if err != nil {
		return err
	}
	if len(ahead) != count {
		level.Warn(s.logger).Log("msg", "the stream holds another number of events published ahead of their time than its newest message counts: those not found may be published again (the duplicate window drops them)",
			"count", count, "found", len(ahead), "stream_seq", m.seq)
	}
	sp.Future = ahead
	return nil
}

// errStaleReplica is a read back that did not reach the controller's newest message: the node
// that answered does not hold it. Right after a partition heals, the node that led the stream
// before the cut may answer as its leader for a moment with what it held then; taking its answer
// would make the position look behind the stream's newest message and publish again what the
// stream holds. The position is read again by the next cycle.
var errStaleReplica = errors.New("a stream node that is not caught up answered")

// walk calls each for every message of the controller after sequence from up to and including m,
// the newest, in order. Every answer must come from a node that holds m: one that runs out of
// messages before it, or skips it, is a replica not caught up (errStaleReplica).
func (s *streamSide) walk(ctx context.Context, from uint64, m *storedMsg, each func(*storedMsg)) error {
	from = min(from, m.seq-1) // a sequence from a header: never past m
	for seq := from + 1; ; {
		x, err := s.sr.from(ctx, seq)
		if err != nil {
			return err
		}
		if x == nil || x.seq > m.seq {
			return fmt.Errorf("%w: reading back from stream sequence %d, message %d, the newest of this controller, was not found", errStaleReplica, from+1, m.seq)
		}
		each(x)
		if x.seq == m.seq {
			return nil
		}
		seq = x.seq + 1
	}
}
