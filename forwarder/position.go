package forwarder

// The position: what has been published of a controller's journal, and how taking an event
// moves it. No I/O: the reader (cycle.go) asks it, the publisher (pipeline.go) moves it past what
// the stream acknowledged, the stream's headers (streampos.go) and the checkpoint carry it.
//
// The rule, whatever the events' created say:
//   - Created (the watermark W) and IDs: every event dated before W was published (or predates
//     the start, or was lost at the source, counted in gaps), and so were the events of IDs,
//     dated exactly W. W moves only to the created of an event taken no later than the cutoff
//     of the read that took it (cutoff): settleTime before the earlier of the exporter's clock
//     and the controller's (its answers' Date). So a controller's clock that runs ahead, for one
//     event or for good, never moves W past events the controller writes after it, which
//     ordering by created lists before the ones dated ahead; and an event that appears in the
//     list after newer ones (its transaction committed late, the controller's clock stepped
//     back by less than settleTime) is still above W when it appears.
//   - Future: the events published although dated after the cutoff when they were read, known
//     by id (and the stream sequence their messages follow, After) until W passes them. There
//     is no count threshold: as many as the controller dates ahead, up to maxFutureIDs (about
//     100 bytes each: 10 MB at most per controller). Beyond it an event dated ahead is held
//     back, not published and not lost: it goes out once the cutoff has passed it.
//   - promote: once a read has published everything it listed, the events of Future the cutoff
//     has passed move W up to the newest of them, so that a controller whose clock runs hours
//     ahead all the time is remembered by id for as long as it is ahead, not for ever.
//
// An event is published exactly when published/publishedEvent says so; the reader takes every
// listed event not published, in the journal's order.

import (
	"slices"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// position is where a controller's event stream has been published up to.
// Several events can share one created instant, so the instant alone is not enough.
type position struct {
	Created time.Time `json:"created"` // the watermark W: newest created taken at or before the clock; zero before anything
	IDs     []string  `json:"ids"`     // ids published at exactly Created
	// Known is true once a position was established (start: latest with an empty journal
	// stays known with a zero Created).
	Known bool `json:"known"`
	// FromStart says the position is where events.start put a first start, not one published
	// up to: the stream's, when it holds any of this controller, replaces it without a rewind.
	FromStart bool `json:"from_start,omitempty"`
	// Seen describes the journal when it was last read, so that events lost at the source
	// (deleted before they could be read) can be counted exactly: Ahead events were newer than
	// the position up to and including the newest one then, Tail.
	Ahead       int       `json:"ahead"`
	TailID      string    `json:"tail_id,omitempty"`
	TailCreated time.Time `json:"tail_created,omitzero"`
	// Future are events published ahead of their time (dated after the exporter's clock when
	// they were read), in the order they were published; see the file comment.
	Future []futureEvent `json:"future,omitempty"`
	// Odd are the last maxOddIDs events published that could not be read as events (no id, no
	// readable created, not an object): they are dated as a neighbour on the page they were read
	// on, which differs from page to page, so they are known by id.
	Odd []string `json:"odd,omitempty"`
	// ahead indexes Future by id once it is long (isFuture); clone starts a copy without it.
	ahead map[string]struct{}
}

// settleTime is how long after its created an event may still appear in the journal: the
// platform dates an event when it is written, and lists it once its transaction commits, which
// may be after newer events were listed; an NTP correction may step the controller's clock back.
// The events of the last settleTime are known by id (Future) and re-read by every cycle: at
// 50 events a second, 250 of them.
const settleTime = 5 * time.Second

// defaultSettle is the settle time of a new forwarder's reader: settleTime, but in the tests that
// follow the position event by event (TestMain; the property test and the settle tests set it).
var defaultSettle = settleTime

// cutoff is the instant up to which a read that began when the exporter's clock said now and the
// controller's (its last answer's Date, zero when not known) said controller lets W move: what
// the controller lists later is dated after it (settle, settleTime). A controller's clock running
// behind the exporter's (time zones, no NTP) dates its events behind the exporter's clock; the
// Date header, to the second, says by how much. With settle 0 (events appear in the order of
// their created: the tests that follow the position event by event) it is the exporter's clock.
func cutoff(now, controller time.Time, settle time.Duration) time.Time {
	if settle > 0 && !controller.IsZero() && controller.Before(now) {
		now = controller
	}
	return now.Add(-settle)
}

// maxOddIDs bounds position.Odd: an event that does not decode is re-read at most a few pages
// after it was published (where its borrowed date may still be ahead of the position).
const maxOddIDs = 256

// futureEvent is one event of position.Future.
type futureEvent struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// After is a stream sequence before the event's message (0: not known): the stream's
	// headers resume a position whose Future is too long to list from the messages after it.
	After uint64 `json:"after,omitempty"`
}

// afterPending is futureEvent.After of an event taken by a read whose batch has not gone out:
// the publisher knows the sequence (markInstants), the reader does not.
const afterPending = ^uint64(0)

// maxFutureIDs bounds position.Future: the memory (and, at a restart from the stream, the
// messages read back) that events dated ahead of the clock may cost.
const maxFutureIDs = 100_000

// take says how the reader takes e, read by a cycle whose cutoff is now: ahead (published
// ahead of its time, remembered by id), held (dated ahead while Future is full: left for a later
// read) or neither (an ordinary event: it moves W). It moves the position past e unless held.
// An event that does not decode counts as dated as the neighbour it borrowed its created from.
func (p *position) take(e *veil.Event, now time.Time) (ahead, held bool) {
	if e.Created.After(now) {
		if len(p.Future) >= maxFutureIDs {
			return false, true
		}
		p.addFuture(e.Created.Time, e.ID, afterPending)
		ahead = true
	} else {
		p.advance(e.Created.Time, e.ID)
	}
	if e.Invalid != "" {
		p.addOdd(e.ID)
	}
	return ahead, false
}

// addOdd remembers an event that could not be read as one.
func (p *position) addOdd(id string) {
	if len(p.Odd) >= maxOddIDs {
		p.Odd = slices.Delete(p.Odd, 0, len(p.Odd)-maxOddIDs+1)
	}
	p.Odd = append(p.Odd, id)
}

// mergeOdd is the ids of older followed by those of newer not among them, the last maxOddIDs.
func mergeOdd(older, newer []string) []string {
	out := make([]string, 0, len(older)+len(newer))
	for _, id := range older {
		if !slices.Contains(newer, id) {
			out = append(out, id)
		}
	}
	out = append(out, newer...)
	return out[max(0, len(out)-maxOddIDs):]
}

// datedAfter is how many events of Future are dated after now (the exporter's clock): those of a
// controller whose clock runs ahead, not the last settleTime's.
func (p *position) datedAfter(now time.Time) int {
	n := 0
	for _, a := range p.Future {
		if a.Created.After(now) {
			n++
		}
	}
	return n
}

// addFuture records an event published ahead of its time.
func (p *position) addFuture(created time.Time, id string, after uint64) {
	p.Future = append(p.Future, futureEvent{ID: id, Created: created, After: after})
	if p.ahead != nil {
		p.ahead[id] = struct{}{}
	}
}

// indexAheadFrom is the length of Future from which isFuture looks ids up in an index.
const indexAheadFrom = 16

// isFuture says whether id was published ahead of its time.
func (p *position) isFuture(id string) bool {
	if len(p.Future) < indexAheadFrom {
		for i := range p.Future {
			if p.Future[i].ID == id {
				return true
			}
		}
		return false
	}
	if p.ahead == nil {
		p.ahead = make(map[string]struct{}, len(p.Future))
		for _, a := range p.Future {
			p.ahead[a.ID] = struct{}{}
		}
	}
	_, ok := p.ahead[id]
	return ok
}

// published says whether an event with this created and id is at or before the position.
func (p *position) published(created time.Time, id string) bool {
	if !p.Known {
		return false
	}
	switch created.Compare(p.Created) {
	case -1:
		return true
	case 1:
		return false
	}
	return slices.Contains(p.IDs, id)
}

// passed says whether the position is past e. It follows the journal's order (the boundary is
// searched with it), so events published ahead of their time are not passed (publishedEvent).
// An event with no readable created is dated as its older neighbour on the page (decodeEvents),
// which says where the journal lists it but not whether it was published: it is passed only
// when dated no later than the position and known by id (published at the position's instant,
// or one of Odd).
func (p *position) passed(e *veil.Event) bool {
	if !undated(e) {
		return p.published(e.Created.Time, e.ID)
	}
	return p.Known && !e.Created.After(p.Created) &&
		(slices.Contains(p.IDs, e.ID) || slices.Contains(p.Odd, e.ID))
}

// undated says whether e has no created of its own: the one it has is its neighbour's.
func undated(e *veil.Event) bool {
	return e.Invalid != "" && e.Invalid != rejectNoID
}

// publishedEvent says whether e was published: passed, published ahead of its time, or one of
// the events that do not decode published lately.
func (p *position) publishedEvent(e *veil.Event) bool {
	return p.passed(e) || p.isFuture(e.ID) || e.Invalid != "" && slices.Contains(p.Odd, e.ID)
}

// advance moves the position past one event published after it.
func (p *position) advance(created time.Time, id string) {
	if !p.Known || created.After(p.Created) {
		p.Created, p.IDs, p.Known = created, []string{id}, true
		p.forgetPassed()
		return
	}
	p.IDs = append(p.IDs, id)
}

// forgetPassed drops the events of Future that W has passed: published says so now. One dated
// exactly W joins IDs.
func (p *position) forgetPassed() {
	p.Future = slices.DeleteFunc(p.Future, func(a futureEvent) bool {
		c := a.Created.Compare(p.Created)
		if c == 0 && !slices.Contains(p.IDs, a.ID) {
			p.IDs = append(p.IDs, a.ID)
		}
		if c <= 0 && p.ahead != nil {
			delete(p.ahead, a.ID)
		}
		return c <= 0
	})
}

// promote moves W up to the newest event of Future dated no later than now, the cutoff of a
// read that published everything it listed: every event dated up to it was published
// then. It says whether W moved.
func (p *position) promote(now time.Time) bool {
	w, found := p.Created, false
	for _, a := range p.Future {
		if !a.Created.After(now) && (a.Created.After(w) || !p.Known) {
			w, found = a.Created, true
		}
	}
	if !found {
		return false
	}
	p.Created, p.IDs, p.Known = w, nil, true
	p.forgetPassed()
	return true
}

// maxStoredFuture and maxStoredIDs bound the events of Future and of IDs a bucket's stored
// position lists (about 100 and 40 bytes each: 400 KB and 320 KB of a value NATS takes up to
// its max_payload, 1 MB by default). A bucket refuses a larger value, and the position would
// never be stored: a burst of 10,000 events within the settle time, a controller an hour ahead
// for good at 3 events a second, or 30,000 events at one instant would stop forwarding.
const (
	maxStoredFuture = 4000
	maxStoredIDs    = 8000
)

// stored is p as a bucket stores it: the newest maxStoredFuture events of Future and
// maxStoredIDs of IDs. The ones left out count as not published to a restart that has only this
// position (the stream's headers list them all, Veil-Future-After-Seq and
// Veil-Created-After-Seq): published again, never lost, within the duplicate window caught by
// NATS.
func (p position) stored() position {
	if n := len(p.IDs); n > maxStoredIDs {
		p.IDs = slices.Clone(p.IDs[n-maxStoredIDs:])
	}
	if n := len(p.Future); n > maxStoredFuture {
		p.Future = slices.Clone(p.Future[n-maxStoredFuture:])
		p.ahead = nil
	}
	return p
}

func (p position) clone() position {
	p.IDs = slices.Clone(p.IDs)
	p.Future = slices.Clone(p.Future)
	p.Odd = slices.Clone(p.Odd)
	p.ahead = nil
	return p
}
