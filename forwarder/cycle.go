package forwarder

// One cycle of the forwarder: locate the boundary between published and new events (noticing
// events lost at the source), then read the new ones page by page and publish them in order.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

// cycle publishes what is new since the position; it returns how many events it published.
func (fw *Forwarder) cycle(ctx context.Context) (int, error) {
	// NATS is checked first, so readiness follows it even while the journal cannot be read.
	natsErr := fw.out.check(ctx)
	fw.obs.setNotReady(natsErr)
	fw.mu.Lock()
	mustSync := fw.out.mustSync()
	fw.mu.Unlock()
	if natsErr == nil && mustSync {
		natsErr = fw.syncFromStream(ctx)
		if errors.Is(natsErr, errFenced) || errors.Is(natsErr, errCheckpointConflict) {
			return 0, natsErr
		}
		fw.obs.setNotReady(natsErr) // until the stream says where we are, nothing is published
	}
	return fw.tail(ctx, natsErr)
}

// tail locates the boundary between published and new events and, unless natsErr says NATS
// cannot take them, publishes the new ones: the cycle with the stream's part done (a property
// test runs it over a journal in memory).
func (fw *Forwarder) tail(ctx context.Context, natsErr error) (int, error) {
	j := &fw.reader
	clock, before := fw.clock(), j.controllerClock()
	fw.mu.Lock()
	pos := fw.pos.clone()
	fw.mu.Unlock()
	bd, err := j.locate(ctx, &pos)
	if err != nil {
		return 0, err
	}
	now := cutoff(clock, j.controllerAt(before), j.settle)
	newCount := bd.fresh(j.dir())
	fw.mu.Lock()
	// What locate saw of the journal, to count later losses by (only Run's goroutine moves the
	// position meanwhile: the pipeline is closed).
	fw.pos.Ahead, fw.pos.TailID, fw.pos.TailCreated = pos.Ahead, pos.TailID, pos.TailCreated
	fw.obs.setBacklog(max(0, newCount-len(pos.Future))) // those are published: the journal lists them last
	fw.mu.Unlock()
	// Locating while NATS is away keeps the view of the journal fresh, so that events deleted
	// before NATS returns can be counted, and the backlog grows while nothing can be published
	// (which is when its alert matters).
	if natsErr != nil {
		return 0, natsErr
	}
	if newCount <= 0 {
		if j.dir() == newestFirst {
			j.hint = 0
		} else {
			j.hint = bd.count
		}
		fw.promote(now)
		return 0, nil
	}
	// Should reading fail (the list moved past the overlap), the next cycle looks where the
	// boundary just was rather than searching the whole list, which under a moving list takes
	// long enough for the list to move again.
	j.hint = bd.b
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

// read publishes the new events in chronological order, reading pages concurrently through a
// bounded window. Each page overlaps what was read before it by one row, which proves that nothing
// between them was skipped, plus a slack of rows on the side the list moves (older events: new
// ones push them to higher offsets newest first, retention pulls them to lower offsets oldest
// first), so that the list moving between two reads shifts the overlap inside the page instead of
// past it.
func (fw *Forwarder) read(ctx context.Context, pos position, bd boundary, now time.Time) (int, error) {
	pl := fw.startPipeline(ctx)
	j := &fw.reader
	r := &reading{
		j: j, obs: fw.obs, pl: pl, pos: pos, d: j.dir(), anchored: bd.anchored, sl: newSlack(j.slack, j.page),
		first: true, lastOff: bd.b, now: now,
	}
	r.env = envelope{prefix: fw.out.stream.cfg.SubjectPrefix, controller: fw.opts.Controller, source: fw.source, order: r.d, limit: fw.out.stream.messageLimit()}
	err := r.run(ctx, bd)
	n, perr := pl.close()
	fw.mu.Lock()
	switch {
	case perr != nil && ctx.Err() == nil && !errors.Is(perr, errConflict):
		fw.out.serialLeft = serialEvents // what failed goes out again one at a time
	default:
		fw.out.serialLeft = pl.serial // what this cycle did not send of it
	}
	fw.mu.Unlock()
	if perr != nil {
		return n, perr // a publish failure or a lost position outranks what reading saw
	}
	fw.obs.holding(r.held)
	if err == nil {
		j.hint = r.lastOff
		fw.obs.setBacklog(r.held) // read to the end of the list: what it held back is left
		if r.held == 0 {
			fw.promote(now)
		}
	}
	return n, err
}

// run reads the new events from the boundary bd and sends them through the pipeline in batches;
// then r.lastOff is the offset where the next cycle expects the boundary and r.held how many
// events dated ahead it held back.
func (r *reading) run(ctx context.Context, bd boundary) error {
	defer func() { r.j.slack = r.sl.load() }()
	r.batch = r.newBatch()
	pages := r.j.readSpans(ctx, newSpanPlan(r.d, r.j.page, bd, r.sl))
	defer pages.Stop()
	for {
		f, ok, err := pages.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if err := r.take(f); err != nil {
			return err
		}
	}
	if err := r.flush(); err != nil {
		return err
	}
	return ctx.Err()
}

// reading is one read of the new events, page by page in the plan's order: it proves each page
// contiguous with what came before, takes the events not yet published in chronological order
// and sends them through the pipeline in batches.
type reading struct {
	j        *journalReader
	obs      *observer
	pl       *pipeline
	pos      position // advanced with every event taken
	d        direction
	anchored bool
	sl       *slack
	env      envelope // what every message of the read shares
	batch    sentBatch
	first    bool      // no page taken yet
	prevID   string    // the newest event of the page before
	lastOff  int       // where the next cycle expects the boundary
	now      time.Time // the cycle's cutoff: what is dated after it is remembered by id (Future)
	held     int       // events dated ahead left unpublished (position.take)
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
	if r.j.auto {
		if dd := detect(items); dd != unknownOrder && dd != r.d {
			r.j.learnOrder(items)
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
			r.obs.addDups(m - planned)
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
		// The page begins among published events: its first event is, or its first with a
		// created of its own (one with none before it may be one a restart forgot). An event
		// with no created of its own anchors it only when no dated one on it is published.
		first := slices.IndexFunc(chron, func(e veil.Event) bool { return !undated(&e) })
		if first < 0 {
			first = 0
		}
		if len(chron) == 0 || !r.pos.passed(&chron[0]) && !r.pos.passed(&chron[first]) {
			return m, r.resync()
		}
		for i := range chron {
			if r.pos.passed(&chron[i]) && (!undated(&chron[i]) || m < 0) {
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
		m, reason := r.env.message(&b.events[len(b.events)-1], &r.pos)
		b.msgs = append(b.msgs, m)
		if reason != "" {
			r.obs.rejectedEvent(&b.events[len(b.events)-1], m, reason)
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
