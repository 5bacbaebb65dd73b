package forwarder

// The observer: what the reader of pages and the publisher report as they go (counters, the
// rings of recent and rejected events, why forwarding fails or waits, the last cycle's outcome),
// the log lines said once per episode, and the metrics and status built from them. It decides
// nothing: the position and the stream's state are the Forwarder's, under fw.mu.
//
// Locking: the observer has a mutex of its own, always taken after fw.mu when both are held and
// never before (the observer calls nothing that takes fw.mu), so that the publisher can count an
// acknowledgement together with the position it moved, and Status and Collect see both at once.

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
)

// pubKey is the label pair of veil_events_published_total.
type pubKey struct{ typ, class string }

// maxEntityClasses bounds the entity_class label of veil_events_published_total per controller;
// further classes count as other (the subject keeps the class).
const maxEntityClasses = 50

// descs are the metric families the observer reports.
type descs struct {
	published, rejected, pubErrors, dups, gaps, episodes, conflicts, adoptions, rewinds, republished, newestCreated, backlog, ahead, held, natsUp *prometheus.Desc
}

// observer holds what the forwarder reports of itself.
type observer struct {
	logger log.Logger
	conn   *natsconn.Conn // whether NATS is connected is read from it when asked
	descs  descs
	outage runstatus.Outage // logs runs of failures; its own lock

	mu      sync.Mutex
	backlog int // events known but not yet published
	// held is how many events dated ahead the last read left unpublished (position.take);
	// aheadSaid when the controller's clock running ahead was last logged.
	held      int
	aheadSaid time.Time
	published map[pubKey]uint64
	classes   map[string]bool // entity_class label values in use, at most maxEntityClasses
	pubErrors uint64
	dups      uint64
	gaps      gapCount
	stream    streamCount
	lastAcked time.Time // wall clock of the last acknowledgement (not the event's created)
	run       runState
	recent    ring[RecentEvent]
	rejected  rejections
}

// gapCount is what locate found lost at the source.
type gapCount struct {
	lost     uint64 // events known lost (veil_events_gaps_total)
	episodes uint64
	last     GapEpisode
	logged   bool // the episode going on was logged
}

// streamCount is what the stream refused or lost, and the lease's waits.
type streamCount struct {
	// conflicts counts publishes the stream refused; inConflict that the last publish was one
	// (one log line per episode).
	conflicts  uint64
	inConflict bool
	// adoptions counts conflicts on the stored position a lease holder answered by storing its
	// own over it (adopt).
	adoptions uint64
	// fenced counts the times forwarding waited at the fence for the lease.
	fenced      uint64
	rewinds     uint64
	lastRewind  Rewind
	republished uint64
}

// runState is how forwarding fares: the last cycle, the last failure, why it waits.
type runState struct {
	lastErr  string
	notReady string // why NATS, stream or position store keep events back; "" when they don't
	stopped  bool
	cycleOK  bool
	cycleDur time.Duration
	lastOK   time.Time
}

// ring keeps the last recentLen values added.
type ring[T any] struct {
	items [recentLen]T
	n     int // values ever added
}

func (r *ring[T]) add(v T) {
	r.items[r.n%recentLen] = v
	r.n++
}

// newestFirst is what the ring holds, the newest first.
func (r *ring[T]) newestFirst() []T {
	n := min(r.n, recentLen)
	out := make([]T, n)
	for i := range n {
		out[i] = r.items[(r.n-1-i)%recentLen]
	}
	return out
}

func newObserver(logger log.Logger, conn *natsconn.Conn, d descs) *observer {
	o := &observer{logger: logger, conn: conn, descs: d, published: map[pubKey]uint64{}, classes: map[string]bool{},
		rejected: rejections{counts: map[string]uint64{rejectTooLarge: 0, rejectLongToken: 0, rejectNoID: 0, rejectBadCreated: 0, rejectNotObject: 0}, seen: map[string]struct{}{}}}
	o.outage.Logger, o.outage.Remind = logger, failureLogEvery
	return o
}

// failureLogEvery is how often a run of failures is logged again.
const failureLogEvery = 5 * time.Minute

// fail records a failure to be retried; the outage logs the first of a run of failures and then
// a reminder every failureLogEvery: during an outage every retry (once a second) fails alike.
func (o *observer) fail(err error) {
	o.mu.Lock()
	o.run.lastErr = err.Error()
	o.mu.Unlock()
	o.outage.Fail(time.Now(), level.Warn, "event forwarding failed; retrying (repeated at most every "+failureLogEvery.String()+" while it goes on)", err)
}

// stop records that forwarding stopped for good on err.
func (o *observer) stop(err error) {
	level.Error(o.logger).Log("msg", "stopped forwarding: another instance owns the position", "err", err)
	o.mu.Lock()
	o.run.stopped, o.run.lastErr = true, err.Error()
	o.mu.Unlock()
}

// cycled records the end of a cycle that began at start.
func (o *observer) cycled(start time.Time, err error) {
	o.mu.Lock()
	o.run.cycleDur, o.run.cycleOK = time.Since(start), err == nil
	if err == nil {
		o.run.lastOK, o.run.lastErr = time.Now(), ""
	}
	o.mu.Unlock()
	if err == nil {
		o.outage.Recover(time.Now(), "event forwarding recovered")
	}
}

// setNotReady records why NATS keeps events back (nil: it does not).
func (o *observer) setNotReady(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		o.run.notReady = ""
		return
	}
	o.run.notReady = err.Error()
}

// notReady says why events are not forwarded now, "" when they are. o.mu is held.
func (o *observer) notReady() string {
	if !o.conn.Connected() {
		return o.conn.NotConnected().Error()
	}
	return o.run.notReady
}

// holding records how many events dated ahead the last read held back, and says so once when
// holding begins.
func (o *observer) holding(n int) {
	o.mu.Lock()
	was := o.held
	o.held = n
	o.mu.Unlock()
	if n > 0 && was == 0 {
		level.Warn(o.logger).Log("msg", "events dated ahead of this machine's clock are held back: the position remembers as many such events as it may; each goes out once the clock passes it", "held", n, "remembered", maxFutureIDs)
	}
}

// aheadLogEvery is how often a controller's clock running ahead is logged again; aheadLogLead how
// far ahead an event must be dated for it to be logged (a clock a second ahead is no news).
const (
	aheadLogEvery = 5 * time.Minute
	aheadLogLead  = time.Minute
)

// aheadFrom says, at most every aheadLogEvery, that events dated ahead were published: the first
// of an episode is a, now the exporter's clock.
func (o *observer) aheadFrom(a futureEvent, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	lead := a.Created.Sub(now)
	if lead < aheadLogLead || now.Sub(o.aheadSaid) < aheadLogEvery {
		return
	}
	o.aheadSaid = now
	level.Warn(o.logger).Log("msg", "an event is dated ahead of this machine's clock (is the controller's clock or time zone wrong?): published, and remembered by id until the clock passes it, so that events written after it are published too", "id", a.ID, "created", a.Created, "ahead_by", lead.Round(time.Second))
}

func (o *observer) setBacklog(n int) {
	o.mu.Lock()
	o.backlog = n
	o.mu.Unlock()
}

func (o *observer) addDups(n int) {
	o.mu.Lock()
	o.dups += uint64(n)
	o.mu.Unlock()
}

// acked counts events the stream acknowledged (msgs their messages), republished of them
// published again after a rewind.
func (o *observer) acked(events []veil.Event, msgs []*nats.Msg, republished int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stream.inConflict = false
	o.stream.republished += uint64(republished)
	for i, e := range events {
		o.published[pubKey{typeLabel(e.Type), o.classLabel(&e)}]++
		if i >= len(events)-recentLen {
			o.recent.add(RecentEvent{ID: e.ID, Type: e.Type, Subject: msgs[i].Subject, Message: eventMessage(e.Raw), Created: e.Created.Time})
		}
	}
	o.lastAcked = time.Now()
	o.backlog = max(0, o.backlog-len(events))
}

// classLabel is the entity_class label of e: its first entity's class sanitized like the subject
// token, none without an entity, other past maxEntityClasses distinct values. o.mu is held.
func (o *observer) classLabel(e *veil.Event) string {
	if len(e.Entities) == 0 {
		return "none"
	}
	c, _ := subjectToken(e.Entities[0].Class)
	if o.classes[c] {
		return c
	}
	if len(o.classes) >= maxEntityClasses {
		return "other"
	}
	o.classes[c] = true
	return c
}

// publishFailed counts a failed publish. A refused expectation is a conflict, logged once per
// episode.
func (o *observer) publishFailed(err error) {
	o.mu.Lock()
	logIt := false
	if conflict := errors.Is(err, errConflict); conflict {
		o.stream.conflicts++
		logIt, o.stream.inConflict = !o.stream.inConflict, true
	} else {
		o.pubErrors++
	}
	o.mu.Unlock()
	if logIt {
		level.Warn(o.logger).Log("msg", "the stream refused a publish (another replica published, or the stream holds other than expected): reading the position from the stream again", "err", err)
	}
}

// saveFailed counts a position that could not be stored, to be retried.
func (o *observer) saveFailed(err error) {
	o.mu.Lock()
	o.pubErrors++
	o.mu.Unlock()
	o.fail(fmt.Errorf("position not stored, publishing paused until it is: %w", err))
}

func (o *observer) fencedWait() {
	o.mu.Lock()
	o.stream.fenced++
	o.mu.Unlock()
}

func (o *observer) adopted() {
	o.mu.Lock()
	o.stream.adoptions++
	o.mu.Unlock()
}

// rewound records a rewind: the stream held less than the stored position.
func (o *observer) rewound(r Rewind) {
	o.mu.Lock()
	o.stream.rewinds++
	o.stream.lastRewind = r
	o.mu.Unlock()
}

// gapLogged says whether the gap episode going on was logged.
func (o *observer) gapLogged() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gaps.logged
}

// anchored records that the position's event was found: a later loss is a new episode.
func (o *observer) anchored() {
	o.mu.Lock()
	o.gaps.logged = false
	o.mu.Unlock()
}

// gapFound is what countGap found: lost events (exactly, or a lower bound) created after the
// position's event and before the oldest one listed; logged says the episode was logged already.
type gapFound struct {
	lost          int
	exact, logged bool
	after, before time.Time
}

// gap counts and logs events lost at the source.
func (o *observer) gap(g gapFound) {
	o.mu.Lock()
	o.gaps.logged = true
	o.gaps.lost += uint64(g.lost)
	episode := !g.exact && !g.logged
	if episode {
		o.gaps.episodes++
		o.gaps.last = GapEpisode{At: time.Now(), After: g.after, Before: g.before, Lost: uint64(g.lost)}
	}
	o.mu.Unlock()
	switch {
	case episode:
		level.Warn(o.logger).Log("msg", "the position's event is gone and continuity with it cannot be proven: events created between after and before may have been deleted unread (a gap episode)",
			"lost_at_least", g.lost, "after", g.after, "before", g.before)
	case g.lost > 0 && g.exact:
		level.Warn(o.logger).Log("msg", "events were deleted by the platform before they could be read", "lost", g.lost, "after", g.after)
	case g.lost > 0:
		level.Warn(o.logger).Log("msg", "more events were deleted by the platform before they could be read", "lost_at_least", g.lost, "after", g.after)
	}
}
