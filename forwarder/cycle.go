package forwarder

// One cycle of the forwarder: locate the boundary between published and new events (noticing
// events lost at the source), then read the new ones page by page and publish them in order.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

// cycle publishes what is new since the position; it returns how many events it published.
func (fw *Forwarder) cycle(ctx context.Context) (int, error) {
	// NATS is checked first, so readiness follows it even while the journal cannot be read.
	natsErr := fw.checkNATS(ctx)
	if natsErr == nil && fw.mustSync() {
		natsErr = fw.syncFromStream(ctx)
		if errors.Is(natsErr, errFenced) || errors.Is(natsErr, errCheckpointConflict) {
			return 0, natsErr
		}
		fw.setNotReady(natsErr) // until the stream says where we are, nothing is published
	}
	return fw.tail(ctx, natsErr)
}

// tail locates the boundary between published and new events and, unless natsErr says NATS
// cannot take them, publishes the new ones: the cycle with the stream's part done (a property
// test runs it over a journal in memory).
func (fw *Forwarder) tail(ctx context.Context, natsErr error) (int, error) {
	now := fw.clock()
	fw.mu.Lock()
	pos, hint := fw.pos.clone(), fw.hint
	fw.mu.Unlock()
	bd, err := fw.locate(ctx, &pos, hint)
	if err != nil {
		return 0, err
	}
	newCount := bd.fresh(fw.dir())
	fw.mu.Lock()
	fw.backlog = max(0, newCount-len(pos.Future)) // those are published: the journal lists them last
	fw.mu.Unlock()
	// Locating while NATS is away keeps the view of the journal fresh, so that events deleted
	// before NATS returns can be counted, and the backlog grows while nothing can be published
	// (which is when its alert matters).
	if natsErr != nil {
		return 0, natsErr
	}
	if newCount <= 0 {
		if fw.dir() == newestFirst {
			fw.setHint(0)
		} else {
			fw.setHint(bd.count)
		}
		fw.promote(now)
		return 0, nil
	}
	// Should reading fail (the list moved past the overlap), the next cycle looks where the
	// boundary just was rather than searching the whole list, which under a moving list takes
	// long enough for the list to move again.
	fw.setHint(bd.b)
	return fw.read(ctx, pos, bd, now)
}

// boundary is where locate found the published events end: oldest first, offsets below b are
// published; newest first, offsets from b on are. anchored says that the published event next
// to b exists (otherwise reading starts at the very start of the list). seen is the page it
// found the boundary on, when it found it on the first page it read: reading may take its first
// page from it (seen.cover).
type boundary struct {
	b, count int
	anchored bool
	seen     *seenPage
}

// fresh is how many events the list holds past the boundary in the direction d.
func (bd boundary) fresh(d direction) int {
	if d == oldestFirst {
		return bd.count - bd.b
	}
	return bd.b
}

// promote moves the acknowledged position up past the events published ahead of their time
// that the clock has passed (position.promote), after a read that began at now and published
// everything it listed (the pipeline is closed: nothing else moves the position meanwhile).
func (fw *Forwarder) promote(now time.Time) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.pos.promote(now)
}

// setUpError is a stream or position store set-up that failed with NATS connected.
type setUpError struct{ err error }

func (e *setUpError) Error() string { return e.err.Error() }
func (e *setUpError) Unwrap() error { return e.err }

// checkNATS makes sure events can be published: NATS connected, the stream set up. It records
// why not for NotReady.
func (fw *Forwarder) checkNATS(ctx context.Context) error {
	c := fw.stream.conn
	var err error
	switch {
	case !c.Connected():
		err = c.NotConnected()
	default:
		if serr := fw.stream.setUp(ctx); serr != nil {
			if c.Connected() {
				err = &setUpError{serr}
			} else {
				err = serr
			}
		}
	}
	fw.setNotReady(err)
	return err
}

// mustSync says whether the position must be read from the stream before publishing: at start,
// on a new connection (the server may have lost what it acknowledged), after a refused or
// uncertain publish.
func (fw *Forwarder) mustSync() bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.needSync || fw.epoch != fw.stream.conn.Generation()
}

func (fw *Forwarder) setHint(h int) {
	fw.mu.Lock()
	fw.hint = h
	fw.mu.Unlock()
}

// locate finds the boundary between published and new events, starting at the offset where
// the last cycle left it (hint). It also notices events lost at the source and records what is
// needed to count future losses.
func (fw *Forwarder) locate(ctx context.Context, pos *position, hint int) (boundary, error) {
	var b, count int
	var anchored bool
	o := max(0, hint-fw.page/2)
	pg, err := fw.eventsPage(ctx, o, fw.page)
	if err != nil {
		return boundary{}, fmt.Errorf("couldn't read events: %w", err)
	}
	if o > 0 && len(pg.Results) == 0 { // the list shrank below the hint
		o = 0
		if pg, err = fw.eventsPage(ctx, 0, fw.page); err != nil {
			return boundary{}, fmt.Errorf("couldn't read events: %w", err)
		}
	}
	seen := &seenPage{start: o, page: pg}
	fw.learnOrder(pg.Results)
	d := fw.dir()
	count = pg.Count
	// Events published ahead of their time (dated in the future) do not count here: the journal
	// lists them after events that come later, and the boundary is where the position's time is.
	isNew := func(e veil.Event) bool { return !pos.passed(&e) }
	pred := isNew // oldest first: the first new event
	if d == newestFirst {
		pred = func(e veil.Event) bool { return !isNew(e) } // the first published event
	}
	items := pg.Results
	j := -1
	for i := range items {
		if pred(items[i]) {
			j = i
			break
		}
	}
	switch {
	case !pos.Known && d == newestFirst:
		b = count // nothing published: everything is new
	case j > 0 || j == 0 && o == 0:
		b = o + j
	case j < 0 && o+len(items) >= count:
		b = count
	case j == 0:
		seen = nil
		b, o, items, err = fw.walkDown(ctx, o, items, pred)
	default:
		seen = nil
		b, o, items, err = fw.walkUp(ctx, o, items, count, pred)
	}
	if err != nil {
		return boundary{}, err
	}
	// Is the published event next to the boundary still there?
	if d == oldestFirst {
		anchored = b > 0
	} else {
		anchored = b < count
	}
	if !anchored && pos.Known && !pos.Created.IsZero() && count > 0 {
		fw.countGap(ctx, pos, d)
	} else if anchored || count == 0 {
		fw.mu.Lock()
		fw.gapLogged = false
		fw.mu.Unlock()
		fw.observe(ctx, pos, d, b, count, o, items)
	}
	return boundary{b: b, count: count, anchored: anchored, seen: seen}, nil
}

// walkDown looks for the boundary below a page that begins past it, a page at a time, before
// searching: retention moves the boundary down (oldest first) between two cycles by about what it
// deletes meanwhile, which a few pages cover, while a search's dozen reads one after the other
// take long enough for the list to move past what it found. It returns the last page read.
func (fw *Forwarder) walkDown(ctx context.Context, o int, items []veil.Event, pred func(veil.Event) bool) (int, int, []veil.Event, error) {
	for range 4 {
		if o == 0 {
			return 0, o, items, nil
		}
		o = max(0, o-(fw.page-1))
		pg, err := fw.eventsPage(ctx, o, fw.page)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("couldn't read events: %w", err)
		}
		items = pg.Results
		j := slices.IndexFunc(items, pred)
		switch {
		case j > 0 || j == 0 && o == 0:
			return o + j, o, items, nil
		case j < 0:
			// Past this page now: the list moved back up between the two reads.
			return o + len(items), o, items, nil
		}
	}
	b, err := fw.search(ctx, 0, o, pred)
	return b, o, items, err
}

// walkUp is walkDown's counterpart for a boundary past the page read: newest first, arrivals
// move it up while it is looked for.
func (fw *Forwarder) walkUp(ctx context.Context, o int, items []veil.Event, count int, pred func(veil.Event) bool) (int, int, []veil.Event, error) {
	for range 4 {
		o += max(1, len(items)-1)
		pg, err := fw.eventsPage(ctx, o, fw.page)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("couldn't read events: %w", err)
		}
		items, count = pg.Results, pg.Count
		if j := slices.IndexFunc(items, pred); j >= 0 {
			return o + j, o, items, nil
		}
		if o+len(items) >= count {
			return count, o, items, nil
		}
	}
	b, err := fw.search(ctx, o+len(items), count, pred)
	return b, o, items, err
}

// observe remembers how many events follow the position and which is the newest, so that a
// later loss (retention deleting them unread) can be counted exactly. The tail and the boundary
// must come from one view of the journal: when the tail is not on the page already read, the
// event next to the boundary is read before and after it, and an observation across a shift
// (events added or deleted meanwhile) is dropped in favour of the previous one.
func (fw *Forwarder) observe(ctx context.Context, pos *position, d direction, b, count, o int, items []veil.Event) {
	if count == 0 {
		return
	}
	anchorOff, tailOff, ahead := b, 0, b
	if d == oldestFirst {
		anchorOff, tailOff, ahead = b-1, count-1, count-b
	}
	onPage := func(off int) (veil.Event, bool) {
		if i := off - o; i >= 0 && i < len(items) {
			return items[i], true
		}
		return veil.Event{}, false
	}
	read := func(off int) (veil.Event, bool) {
		if e, ok := onPage(off); ok {
			return e, true
		}
		e, _, ok, err := fw.probe(ctx, off)
		return e, err == nil && ok
	}
	tail, ok := onPage(tailOff)
	if !ok {
		before, ok := read(anchorOff)
		if !ok {
			return
		}
		if tail, ok = read(tailOff); !ok {
			return
		}
		after, _, ok, err := fw.probe(ctx, anchorOff)
		if err != nil || !ok || after.ID != before.ID {
			return
		}
	}
	pos.Ahead, pos.TailID, pos.TailCreated = ahead, tail.ID, tail.Created.Time
	fw.mu.Lock()
	fw.pos.Ahead, fw.pos.TailID, fw.pos.TailCreated = ahead, tail.ID, tail.Created.Time
	fw.mu.Unlock()
}

// countGap runs when the position's event is gone and everything left is newer: events between
// it and the oldest remaining one may have been deleted unread. Counted exactly when the tail
// observed earlier is still listed; otherwise continuity cannot be proven: a gap episode, with
// the lower bound in gaps.
func (fw *Forwarder) countGap(ctx context.Context, pos *position, d direction) {
	fw.mu.Lock()
	logged := fw.gapLogged
	fw.mu.Unlock()
	lost, exact, left := 0, false, 0
	var err error
	if pos.TailID != "" {
		// remaining = events still listed that are not newer than the tail we saw.
		notNewer := func(e veil.Event) bool { return !e.Created.After(pos.TailCreated) }
		var x, remaining int
		var ok bool
		var at veil.Event
		if d == oldestFirst {
			x, err = fw.search(ctx, 0, 1<<30, func(e veil.Event) bool { return !notNewer(e) })
			remaining = x
			if err == nil && x > 0 {
				at, _, ok, err = fw.probe(ctx, x-1)
			}
		} else {
			var count int
			_, count, _, err = fw.probe(ctx, 0)
			if err == nil {
				x, err = fw.search(ctx, 0, count, notNewer)
				remaining = count - x
				if err == nil && x < count {
					at, _, ok, err = fw.probe(ctx, x)
				}
			}
		}
		if err == nil && ok && at.Created.Equal(pos.TailCreated) {
			exact = true
			lost = max(0, pos.Ahead-remaining)
			left = min(pos.Ahead, remaining)
		} else if err == nil {
			lost = pos.Ahead // the tail is gone too: at least this many
		}
	}
	var oldest time.Time
	if err == nil && !exact && !logged {
		oldest, err = fw.oldestListed(ctx, d)
	}
	if err != nil {
		return // the journal could not be read: count on a later cycle
	}
	fw.mu.Lock()
	fw.gapLogged = true
	fw.gaps += uint64(lost)
	episode := !exact && !logged
	if episode {
		fw.episodes++
		fw.lastGap = GapEpisode{At: time.Now(), After: pos.Created, Before: oldest, Lost: uint64(lost)}
	}
	fw.mu.Unlock()
	switch {
	case episode:
		level.Warn(fw.logger).Log("msg", "the position's event is gone and continuity with it cannot be proven: events created between after and before may have been deleted unread (a gap episode)",
			"lost_at_least", lost, "after", pos.Created, "before", oldest)
	case lost > 0 && exact:
		level.Warn(fw.logger).Log("msg", "events were deleted by the platform before they could be read", "lost", lost, "after", pos.Created)
	case lost > 0:
		level.Warn(fw.logger).Log("msg", "more events were deleted by the platform before they could be read", "lost_at_least", lost, "after", pos.Created)
	}
	// Account once: what is left unread up to the tail is what a later deletion (the outage goes
	// on) can still lose.
	pos.Ahead = left
	fw.mu.Lock()
	fw.pos.Ahead = left
	fw.mu.Unlock()
}

// oldestListed is the created of the oldest event in the journal (zero when it is empty).
func (fw *Forwarder) oldestListed(ctx context.Context, d direction) (time.Time, error) {
	e, count, ok, err := fw.probe(ctx, 0)
	if err != nil || d == oldestFirst || count <= 1 {
		if !ok {
			return time.Time{}, err
		}
		return e.Created.Time, err
	}
	if e, _, ok, err = fw.probe(ctx, count-1); err != nil || !ok {
		return time.Time{}, err
	}
	return e.Created.Time, nil
}

// read publishes the new events in chronological order, reading pages concurrently through a
// bounded window. Each page overlaps what was read before it by one row, which proves that nothing
// between them was skipped, plus a slack of rows on the side the list moves (older events: new
// ones push them to higher offsets newest first, retention pulls them to lower offsets oldest
// first), so that the list moving between two reads shifts the overlap inside the page instead of
// past it.
func (fw *Forwarder) read(ctx context.Context, pos position, bd boundary, now time.Time) (int, error) {
	pl := fw.startPipeline(ctx)
	next, held, err := fw.readPages(ctx, pos, bd, now, pl)
	n, perr := pl.close()
	fw.mu.Lock()
	switch {
	case perr != nil && ctx.Err() == nil && !errors.Is(perr, errConflict):
		fw.serialLeft = serialEvents // what failed goes out again one at a time
	default:
		fw.serialLeft = pl.serial // what this cycle did not send of it
	}
	fw.mu.Unlock()
	if perr != nil {
		return n, perr // a publish failure or a lost position outranks what reading saw
	}
	fw.holding(held)
	if err == nil {
		fw.setHint(next)
		if held == 0 {
			fw.promote(now)
		}
	}
	return n, err
}

// readPages reads the new events and sends them through pl in batches; it returns the offset
// where the next cycle expects the boundary and how many events dated ahead it held back.
func (fw *Forwarder) readPages(ctx context.Context, pos position, bd boundary, now time.Time, pl *pipeline) (int, int, error) {
	r := &reading{
		fw: fw, pl: pl, pos: pos, d: fw.dir(), anchored: bd.anchored, sl: newSlack(fw.slack, fw.page),
		prefix: fw.stream.cfg.SubjectPrefix, source: fw.source, first: true, lastOff: bd.b,
		limit: fw.stream.messageLimit(), now: now,
	}
	defer func() { fw.slack = r.sl.load() }()
	r.batch = r.newBatch()
	pages := readSpans(ctx, fw.pager, fw.ordering, fw.concurrency(), newSpanPlan(r.d, fw.page, bd, r.sl))
	defer pages.Stop()
	for {
		f, ok, err := pages.Next()
		if err != nil {
			return 0, r.held, err
		}
		if !ok {
			break
		}
		if err := r.take(f); err != nil {
			return 0, r.held, err
		}
	}
	if err := r.flush(); err != nil {
		return 0, r.held, err
	}
	return r.lastOff, r.held, ctx.Err()
}

// reading is one read of the new events, page by page in the plan's order: it proves each page
// contiguous with what came before, takes the events not yet published in chronological order
// and sends them through the pipeline in batches.
type reading struct {
	fw             *Forwarder
	pl             *pipeline
	pos            position // advanced with every event taken
	d              direction
	anchored       bool
	sl             *slack
	prefix, source string
	limit          int // the largest message NATS takes (0: not known)
	batch          sentBatch
	first          bool      // no page taken yet
	prevID         string    // the newest event of the page before
	lastOff        int       // where the next cycle expects the boundary
	now            time.Time // the exporter's clock when the cycle began: what is dated after it is ahead
	held           int       // events dated ahead left unpublished (position.take)
}

func (r *reading) newBatch() sentBatch {
	return sentBatch{events: make([]veil.Event, 0, r.pl.size), msgs: make([]*nats.Msg, 0, r.pl.size), future: make([]bool, 0, r.pl.size)}
}

// take handles one page: its order, its overlap with what came before, its new events.
func (r *reading) take(f veil.Fetched[pageSpan]) error {
	pg, err := spanPage(f)
	if err != nil {
		return r.fail(fmt.Errorf("couldn't read events: %w", err))
	}
	items, sp := pg.Results, f.Span
	if r.fw.auto {
		if dd := detect(items); dd != unknownOrder && dd != r.d {
			r.fw.learnOrder(items)
			return r.fail(errResync)
		}
	}
	chron := items
	// planned is where the overlap would be in chron had the list not moved.
	planned := sp.at - sp.start
	if r.d == newestFirst {
		chron = make([]veil.Event, len(items))
		for i := range items {
			chron[len(items)-1-i] = items[i]
		}
		planned = sp.start + len(items) - 1 - sp.at
	}
	m, err := r.overlap(chron, sp, pg.Count)
	if err != nil {
		return err
	}
	if m >= 0 && sp.at >= 0 {
		r.sl.observe(max(m-planned, planned-m))
		if m > planned {
			// Read again beyond the planned overlap: a page read before the previous one saw
			// the list before it moved.
			r.fw.addDups(m - planned)
		}
	}
	r.first = false
	if len(chron) > 0 {
		r.prevID = chron[len(chron)-1].ID
	}
	if err := r.publish(chron, m); err != nil {
		return err
	}
	if r.pl.takesEarly(len(r.batch.events), rowsBeyond(r.d, sp.start, len(items), pg.Count)) {
		if err := r.flush(); err != nil {
			return err
		}
	}
	if r.d == oldestFirst {
		r.lastOff = sp.start + len(items)
	} else {
		r.lastOff = 0
	}
	return nil
}

// overlap returns where in chron the page overlaps what came before (-1: nowhere to look), or
// errResync when it does not. Contiguity: the first page begins among published events (then no
// new event can come before what it holds) or at the very start of the list; each later page
// contains the previous page's newest event.
func (r *reading) overlap(chron []veil.Event, sp pageSpan, count int) (int, error) {
	m := -1
	switch {
	case r.first && r.anchored:
		if len(chron) == 0 || !r.pos.passed(&chron[0]) {
			return m, r.resync()
		}
		for i := range chron {
			if r.pos.passed(&chron[i]) {
				m = i // the anchor: the newest published event
			}
		}
	case r.first:
		if r.d == newestFirst && sp.start+len(chron) < count {
			return m, r.resync() // grown past the slack: the oldest event is not on the page
		}
	default:
		for i := range chron {
			if chron[i].ID == r.prevID {
				m = i
				break
			}
		}
		if m < 0 {
			return m, r.resync()
		}
	}
	return m, nil
}

// publish takes the new events of chron (m: where it overlaps what came before) into batches.
func (r *reading) publish(chron []veil.Event, m int) error {
	for i, e := range chron {
		if e.Invalid != "" && e.Created.IsZero() && r.pos.Known {
			// No created on the whole page: the journal lists it right after the event before.
			e.Created = veil.Time{Time: r.pos.Created}
		}
		if r.pos.publishedEvent(&e) {
			continue // the overlap, a tie already published, or an event published ahead
		}
		if i < m && !(r.pos.Known && e.Created.Equal(r.pos.Created)) {
			// Before the overlap only an event sharing the position's instant can be new (the
			// platform's order among ties may change between reads); anything else listed
			// there is older than the position.
			continue
		}
		future, held := r.pos.take(&e, r.now)
		if held {
			r.held++ // dated ahead while Future is full: a later read takes it
			continue
		}
		b := &r.batch
		b.events = append(b.events, e)
		b.future = append(b.future, future)
		m, reason := message(r.prefix, r.fw.opts.Controller, r.source, &b.events[len(b.events)-1], &r.pos, r.d, r.limit)
		b.msgs = append(b.msgs, m)
		if reason != "" {
			r.fw.rejectedEvent(&b.events[len(b.events)-1], m, reason)
		}
		if len(b.events) >= r.pl.size {
			if err := r.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush sends the batch, if any; the publisher owns the one sent.
func (r *reading) flush() error {
	if len(r.batch.events) == 0 {
		return nil
	}
	err := r.pl.send(r.batch)
	r.batch = r.newBatch()
	return err
}

// fail sends what was taken before err stopped the read.
func (r *reading) fail(err error) error {
	if ferr := r.flush(); ferr != nil {
		return ferr
	}
	return err
}

// resync: the list moved past the overlap; the next cycle locates again, with a wider slack.
func (r *reading) resync() error {
	r.sl.widen()
	return r.fail(errResync)
}

func (fw *Forwarder) addDups(n int) {
	fw.mu.Lock()
	fw.dups += uint64(n)
	fw.mu.Unlock()
}
