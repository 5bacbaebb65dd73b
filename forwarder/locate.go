package forwarder

// Locating the boundary between published and new events in the journal (a page walk, then a
// binary search), and noticing events lost at the source on the way.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// locate finds the boundary between published and new events, starting at the offset where
// the last cycle left it (j.hint). It also notices events lost at the source and records in pos
// what is needed to count future losses (Ahead, TailID, TailCreated).
func (j *journalReader) locate(ctx context.Context, pos *position) (boundary, error) {
	var b, count int
	var anchored bool
	o := max(0, j.hint-j.page/2)
	pg, err := j.eventsPage(ctx, o, j.page)
	if err != nil {
		return boundary{}, fmt.Errorf("couldn't read events: %w", err)
	}
	if o > 0 && len(pg.Results) == 0 { // the list shrank below the hint
		o = 0
		if pg, err = j.eventsPage(ctx, 0, j.page); err != nil {
			return boundary{}, fmt.Errorf("couldn't read events: %w", err)
		}
	}
	seen := &seenPage{start: o, page: pg}
	j.learnOrder(pg.Results)
	d := j.dir()
	count = pg.Count
	// Events published ahead of their time (dated in the future) do not count here: the journal
	// lists them after events that come later, and the boundary is where the position's time is.
	// An event with no created of its own is dated as a neighbour on its page. Alone on it (or
	// with no dated neighbour), or dated as one at the position's instant, it says nothing of
	// where the boundary is: the events of that instant not published yet may be listed before it
	// (the journal's order among ties is its own). It counts as new, which may put the boundary
	// before it but never past a new event (the reader skips it if it was published).
	isNew := func(e veil.Event) bool {
		return undated(&e) && (e.Created.IsZero() || !e.Created.Before(pos.Created)) || !pos.passed(&e)
	}
	pred := isNew // oldest first: the first new event
	if d == newestFirst {
		pred = func(e veil.Event) bool { return !isNew(e) } // the first published event
	}
	v := view{o: o, items: pg.Results}
	i := slices.IndexFunc(v.items, pred)
	switch {
	case !pos.Known && d == newestFirst:
		b = count // nothing published: everything is new
	case i > 0 || i == 0 && o == 0:
		b = o + i
	case i < 0 && o+len(v.items) >= count:
		b = count
	case i == 0:
		seen = nil
		b, err = j.walkDown(ctx, &v, pred)
	default:
		seen = nil
		b, err = j.walkUp(ctx, &v, count, pred)
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
		j.countGap(ctx, pos, d)
	} else if anchored || count == 0 {
		j.obs.anchored()
		j.observe(ctx, pos, d, boundary{b: b, count: count}, v)
	}
	return boundary{b: b, count: count, anchored: anchored, seen: seen}, nil
}

// view is the last page locate read: its events, read at offset o.
type view struct {
	o     int
	items []veil.Event
}

// walkDown looks for the boundary below a page that begins past it, a page at a time, before
// searching: retention moves the boundary down (oldest first) between two cycles by about what it
// deletes meanwhile, which a few pages cover, while a search's dozen reads one after the other
// take long enough for the list to move past what it found. v, the page read before, becomes
// the last page read.
func (j *journalReader) walkDown(ctx context.Context, v *view, pred func(veil.Event) bool) (int, error) {
	for range 4 {
		if v.o == 0 {
			return 0, nil
		}
		v.o = max(0, v.o-(j.page-1))
		pg, err := j.eventsPage(ctx, v.o, j.page)
		if err != nil {
			return 0, fmt.Errorf("couldn't read events: %w", err)
		}
		v.items = pg.Results
		i := slices.IndexFunc(v.items, pred)
		switch {
		case i > 0 || i == 0 && v.o == 0:
			return v.o + i, nil
		case i < 0:
			// Past this page now: the list moved back up between the two reads.
			return v.o + len(v.items), nil
		}
	}
	return j.search(ctx, 0, v.o, pred)
}

// walkUp is walkDown's counterpart for a boundary past the page read: newest first, arrivals
// move it up while it is looked for.
func (j *journalReader) walkUp(ctx context.Context, v *view, count int, pred func(veil.Event) bool) (int, error) {
	for range 4 {
		v.o += max(1, len(v.items)-1)
		pg, err := j.eventsPage(ctx, v.o, j.page)
		if err != nil {
			return 0, fmt.Errorf("couldn't read events: %w", err)
		}
		v.items, count = pg.Results, pg.Count
		if i := slices.IndexFunc(v.items, pred); i >= 0 {
			return v.o + i, nil
		}
		if v.o+len(v.items) >= count {
			return count, nil
		}
	}
	return j.search(ctx, v.o+len(v.items), count, pred)
}

// observe records in pos how many events follow it and which is the newest, so that a
// later loss (retention deleting them unread) can be counted exactly. The tail and the boundary
// must come from one view of the journal: when the tail is not on the page already read, the
// event next to the boundary is read before and after it, and an observation across a shift
// (events added or deleted meanwhile) is dropped in favour of the previous one.
func (j *journalReader) observe(ctx context.Context, pos *position, d direction, bd boundary, v view) {
	b, count := bd.b, bd.count
	if count == 0 {
		return
	}
	anchorOff, tailOff, ahead := b, 0, b
	if d == oldestFirst {
		anchorOff, tailOff, ahead = b-1, count-1, count-b
	}
	onPage := func(off int) (veil.Event, bool) {
		if i := off - v.o; i >= 0 && i < len(v.items) {
			return v.items[i], true
		}
		return veil.Event{}, false
	}
	read := func(off int) (veil.Event, bool) {
		if e, ok := onPage(off); ok {
			return e, true
		}
		e, _, err := j.probe(ctx, off)
		if err != nil || e == nil {
			return veil.Event{}, false
		}
		return *e, true
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
		after, _, err := j.probe(ctx, anchorOff)
		if err != nil || after == nil || after.ID != before.ID {
			return
		}
	}
	pos.Ahead, pos.TailID, pos.TailCreated = ahead, tail.ID, tail.Created.Time
}

// countGap runs when the position's event is gone and everything left is newer: events between
// it and the oldest remaining one may have been deleted unread. Counted exactly when the tail
// observed earlier is still listed; otherwise continuity cannot be proven: a gap episode, with
// the lower bound in gaps.
func (j *journalReader) countGap(ctx context.Context, pos *position, d direction) {
	logged := j.obs.gapLogged()
	lost, exact, left := 0, false, 0
	var err error
	if pos.TailID != "" {
		// remaining = events still listed that are not newer than the tail we saw.
		notNewer := func(e veil.Event) bool { return !e.Created.After(pos.TailCreated) }
		var x, remaining int
		var at *veil.Event
		if d == oldestFirst {
			x, err = j.search(ctx, 0, 1<<30, func(e veil.Event) bool { return !notNewer(e) })
			remaining = x
			if err == nil && x > 0 {
				at, _, err = j.probe(ctx, x-1)
			}
		} else {
			var count int
			_, count, err = j.probe(ctx, 0)
			if err == nil {
				x, err = j.search(ctx, 0, count, notNewer)
				remaining = count - x
				if err == nil && x < count {
					at, _, err = j.probe(ctx, x)
				}
			}
		}
		if err == nil && at != nil && at.Created.Equal(pos.TailCreated) {
			exact = true
			lost = max(0, pos.Ahead-remaining)
			left = min(pos.Ahead, remaining)
		} else if err == nil {
			lost = pos.Ahead // the tail is gone too: at least this many
		}
	}
	var oldest time.Time
	if err == nil && !exact && !logged {
		oldest, err = j.oldestListed(ctx, d)
	}
	if err != nil {
		return // the journal could not be read: count on a later cycle
	}
	j.obs.gap(gapFound{lost: lost, exact: exact, logged: logged, after: pos.Created, before: oldest})
	// Account once: what is left unread up to the tail is what a later deletion (the outage goes
	// on) can still lose.
	pos.Ahead = left
}

// oldestListed is the created of the oldest event in the journal (zero when it is empty).
func (j *journalReader) oldestListed(ctx context.Context, d direction) (time.Time, error) {
	e, count, err := j.probe(ctx, 0)
	if err != nil || d == oldestFirst || count <= 1 {
		if e == nil {
			return time.Time{}, err
		}
		return e.Created.Time, err
	}
	if e, _, err = j.probe(ctx, count-1); err != nil || e == nil {
		return time.Time{}, err
	}
	return e.Created.Time, nil
}
