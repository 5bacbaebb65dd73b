// Tests of the lease table on its own, as a table: each row is a starting table and what
// happens to it (revisions the watch delivers, what this replica did) at instants after t0,
// and the decisions the table takes at given instants. No NATS, no clock.

package ha

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The rows' lease time: the renew period is 1 s, the margin 600 ms.
const rowTTL = 3 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// happening is one thing that happens to a table at an instant after t0.
type happening struct {
	at time.Duration
	do func(t *table, now time.Time)
}

// seen is a revision of key the watch delivers (value nil: a delete marker).
func seen(at time.Duration, key string, rev uint64, value any) happening {
	return happening{at, func(t *table, now time.Time) {
		op, b := jetstream.KeyValueDelete, []byte(nil)
		if value != nil {
			op = jetstream.KeyValuePut
			b, _ = json.Marshal(value)
		}
		t.view.maxRev = max(t.view.maxRev, rev)
		t.view.apply(key, rev, op, b, now)
	}}
}

func synced(at time.Duration) happening {
	return happening{at, func(t *table, now time.Time) { t.view.synced, t.view.syncedAt = true, now }}
}

// announced: instance's record, announcing ctrls.
func announced(at time.Duration, instance string, rev uint64, ctrls ...string) happening {
	return seen(at, instancePrefix+instance, rev, instanceRecord{Instance: instance, Controllers: ctrls})
}

// announcing: instance's record every renew period from from to to (a live replica); its
// revisions count up from rev.
func announcing(from, to time.Duration, instance string, rev uint64, ctrls ...string) []happening {
	var out []happening
	for at := from; at <= to; at += rowTTL / 3 {
		out = append(out, announced(at, instance, rev, ctrls...))
		rev++
	}
	return out
}

// leased: holder's lease of ct written at rev (its acquisition's id is holder/ct).
func leased(at time.Duration, ct, holder string, rev uint64) happening {
	return seen(at, leaseKey(ct), rev, leaseRecord{Instance: holder, Controller: ct, ID: holder + "/" + ct, Since: t0})
}

// deleted: ct's lease deleted, the marker at rev.
func deleted(at time.Duration, ct string, rev uint64) happening {
	return seen(at, leaseKey(ct), rev, nil)
}

// handing: the hand-over record of ct from one replica to another, at rev.
func handing(at time.Duration, ct, from, to string, rev uint64) happening {
	return seen(at, handOverKey, rev, handOverRecord{Controller: ct, From: from, To: to})
}

// joins: this replica sent its first announcement.
func joins(at time.Duration) happening {
	return happening{at, func(t *table, now time.Time) { t.joined = now }}
}

// holds: this replica acquired ct (its lease's record is seen as well), since then.
func holds(at time.Duration, ct string, rev uint64) happening {
	return happening{at, func(t *table, now time.Time) {
		t.took(ct, tenure{id: t.self + "/" + ct, since: now})
		seen(at, leaseKey(ct), rev, leaseRecord{Instance: t.self, Controller: ct, ID: t.self + "/" + ct, Since: now}).do(t, now)
	}}
}

func letsGo(at time.Duration, ct string) happening {
	return happening{at, func(t *table, _ time.Time) { t.letGo(ct) }}
}

func stopped(at time.Duration, ct string) happening {
	return happening{at, func(t *table, _ time.Time) { t.released(ct) }}
}

// attempts: an acquisition of ct with id sent, its reply lost.
func attempts(at time.Duration, ct, id string) happening {
	return happening{at, func(t *table, now time.Time) { t.attempts[leaseKey(ct)] = attempt{id: id, sent: now} }}
}

func configures(at time.Duration, ctrls ...string) happening {
	return happening{at, func(t *table, _ time.Time) { t.configure(ctrls) }}
}

// answered: the bucket answered this replica's announcement, written at rev.
func answered(at time.Duration, rev uint64) happening {
	return happening{at, func(t *table, now time.Time) { t.heard(rev, now) }}
}

// look is a round planned at an instant, and the decisions it must take (see decisions).
type look struct {
	at   time.Duration
	want []string
}

type tableRow struct {
	name   string
	self   string
	ctrls  []string
	events []happening
	looks  []look
}

func TestLeaseTable(t *testing.T) {
	// What the rows rely on of the rendezvous hashing: the desired owner of a free controller.
	for _, c := range []struct {
		ct    string
		insts []string
		want  string
	}{
		{"alpha", []string{"pod-a", "pod-b"}, "pod-b"},
		{"bravo", []string{"pod-a", "pod-b", "pod-c"}, "pod-c"},
	} {
		eligible := map[string][]string{}
		for _, i := range c.insts {
			eligible[i] = []string{c.ct}
		}
		if got := assign(eligible, nil)[c.ct]; got != c.want {
			t.Fatalf("a row relies on %s going to %s among %v; it goes to %s", c.ct, c.want, c.insts, got)
		}
	}
	for _, row := range tableRows() {
		t.Run(row.name, func(t *testing.T) {
			tb := newTable(row.self, rowTTL, row.ctrls)
			events := slices.Clone(row.events)
			slices.SortStableFunc(events, func(a, b happening) int { return int(a.at - b.at) })
			for _, l := range row.looks {
				for len(events) > 0 && events[0].at <= l.at {
					events[0].do(&tb, t0.Add(events[0].at))
					events = events[1:]
				}
				got := decisions(&tb, t0.Add(l.at))
				if !slices.Equal(got, l.want) {
					t.Errorf("at %v: decided %q, want %q", l.at, got, l.want)
				}
			}
		})
	}
}

// decisions renders what the table decides at now, sorted: acquisitions (over the revision
// seen, or a create), adoptions (with their deadline after t0), removals, the hand-over, the
// end of a hand-over this replica received, and a watch found behind.
func decisions(tb *table, now time.Time) []string {
	r := tb.plan(now)
	var out []string
	for _, a := range r.acquire {
		if a.e == nil {
			out = append(out, "acquire "+a.controller+" (create)")
		} else {
			out = append(out, fmt.Sprintf("acquire %s over %d", a.controller, a.e.rev))
		}
	}
	for _, g := range r.adopt {
		out = append(out, fmt.Sprintf("adopt %s at %d until %v", g.controller, g.rev, g.deadline.Sub(t0)))
	}
	for _, ct := range r.removed {
		out = append(out, "remove "+ct)
	}
	if r.handOver != "" {
		out = append(out, "hand over "+r.handOver+" to "+r.desired[r.handOver])
	}
	if rec, e := tb.handOverDone(now); rec != nil {
		out = append(out, fmt.Sprintf("end hand-over of %s at %d", rec.Controller, e.rev))
	}
	if tb.watchBehind(now) {
		out = append(out, "watch behind")
	}
	slices.Sort(out)
	return out
}

const ms = time.Millisecond

func tableRows() []tableRow { return slices.Concat(acquireRows(), handOverRows(), otherRows()) }

// acquireRows: acquisitions, the first renew period, renewals and lapses.
func acquireRows() []tableRow {
	sec := time.Second
	return []tableRow{
		{name: "acquire: alone after its first renew period, every free lease", self: "pod-a", ctrls: []string{"alpha", "bravo"},
			events: []happening{synced(0), joins(0)},
			looks: []look{
				{1 * sec, []string{"acquire alpha (create)", "acquire bravo (create)"}},
			}},
		{name: "first renew period: a lease free before it came waits", self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), joins(0)},
			looks:  []look{{500 * ms, nil}, {999 * ms, nil}, {1 * sec, []string{"acquire alpha (create)"}}}},
		{name: "first renew period: a lease freed after it sent its announcement is taken at once, over the delete marker",
			self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), leased(0, "alpha", "pod-b", 5), joins(100 * ms), deleted(200*ms, "alpha", 6)},
			looks:  []look{{100 * ms, nil}, {300 * ms, []string{"acquire alpha over 6"}}}},
		{name: "first renew period: a lease freed just before it came waits the period",
			self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), leased(0, "alpha", "pod-b", 5), deleted(200*ms, "alpha", 6), joins(300 * ms)},
			looks:  []look{{400 * ms, nil}, {1299 * ms, nil}, {1300 * ms, []string{"acquire alpha over 6"}}}},
		{name: "first renew period: a lease handed to it is taken at once", self: "pod-c", ctrls: []string{"bravo"},
			events: append(announcing(0, 2*sec, "pod-a", 10, "bravo"), synced(0), leased(0, "bravo", "pod-a", 3),
				handing(100*ms, "bravo", "pod-a", "pod-c", 4), deleted(200*ms, "bravo", 5), joins(250*ms)),
			looks: []look{{300 * ms, []string{"acquire bravo over 5"}}}},
		{name: "renew: a lease renewed within its time is not free", self: "pod-a", ctrls: []string{"alpha"},
			events: append(announcing(0, 5*sec, "pod-b", 10, "alpha"), synced(0), joins(0),
				leased(0, "alpha", "pod-b", 2), leased(2*sec, "alpha", "pod-b", 7), leased(4*sec, "alpha", "pod-b", 9)),
			looks: []look{{3 * sec, nil}, {5500 * ms, nil}}},
		{name: "lapse: a stopped owner's lease is free a lease time after its last renewal, for its desired owner",
			self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), joins(0), announced(0, "pod-b", 1, "alpha"), leased(0, "alpha", "pod-b", 2),
				leased(1*sec, "alpha", "pod-b", 3)},
			looks: []look{{2 * sec, nil}, {3999 * ms, nil}, {4 * sec, []string{"acquire alpha over 3"}}}},
		{name: "lapse: a lease its desired owner leaves free for a lease time is anyone's", self: "pod-a", ctrls: []string{"alpha"},
			// alpha's desired owner is pod-b, live, which does not take it.
			events: append(announcing(0, 6*sec, "pod-b", 10, "alpha"), synced(0), joins(0)),
			looks:  []look{{1 * sec, nil}, {2999 * ms, nil}, {3 * sec, []string{"acquire alpha (create)"}}}},
		{name: "lapse: a lease its desired owner leaves free after its holder lapsed is anyone's a lease time later",
			self: "pod-a", ctrls: []string{"alpha"},
			events: append(announcing(0, 7*sec, "pod-b", 10, "alpha"), synced(0), joins(0), leased(0, "alpha", "pod-c", 2)),
			looks:  []look{{3 * sec, nil}, {5999 * ms, nil}, {6 * sec, []string{"acquire alpha over 2"}}}},
	}
}

// handOverRows: hand-overs and their record.
func handOverRows() []tableRow {
	sec := time.Second
	return []tableRow{
		{name: "hand over: the one it holds longest stays, the other goes to the live replica without its share",
			self: "pod-a", ctrls: []string{"alpha", "bravo"},
			events: append(announcing(0, 2*sec, "pod-b", 10, "alpha", "bravo"), synced(0), joins(0),
				holds(0, "alpha", 2), holds(100*ms, "bravo", 3)),
			looks: []look{{200 * ms, []string{"hand over bravo to pod-b"}}}},
		{name: "hand over: none while another hand-over is in flight, until its record lapses",
			self: "pod-a", ctrls: []string{"alpha", "bravo"},
			events: append(announcing(0, 4*sec, "pod-b", 10, "alpha", "bravo"), synced(0), joins(0),
				holds(0, "bravo", 2), holds(100*ms, "alpha", 3), handing(150*ms, "charlie", "pod-c", "pod-b", 5)),
			looks: []look{{200 * ms, nil}, {3149 * ms, nil}, {3150 * ms, []string{"hand over alpha to pod-b"}}}},
		{name: "hand over: none while a controller has no owner", self: "pod-a", ctrls: []string{"alpha", "bravo", "delta"},
			// charlie, which only pod-b runs, was let go and is not taken yet.
			events: append(announcing(0, 2*sec, "pod-b", 10, "alpha", "bravo", "charlie", "delta"), synced(0), joins(0),
				holds(0, "bravo", 2), holds(50*ms, "delta", 3), holds(100*ms, "alpha", 4), leased(0, "charlie", "pod-b", 5),
				deleted(150*ms, "charlie", 6)),
			looks: []look{{120 * ms, []string{"hand over alpha to pod-b"}}, {200 * ms, nil}}},
		{name: "hand over taken by a third replica: it leaves the controller to the receiver the record names",
			self: "pod-c", ctrls: []string{"bravo"},
			// bravo's desired owner among pod-a, pod-b and pod-c is pod-c.
			events: append(append(announcing(0, 4*sec, "pod-a", 10, "bravo"), announcing(0, 4*sec, "pod-b", 20, "bravo")...),
				synced(0), joins(0), leased(0, "bravo", "pod-a", 3),
				handing(1100*ms, "bravo", "pod-a", "pod-b", 4), deleted(1200*ms, "bravo", 5)),
			looks: []look{{1300 * ms, nil}, {4099 * ms, nil}, {4100 * ms, []string{"acquire bravo over 5"}}}},
		{name: "hand over taken by a third replica: one the record names is not live, it takes it",
			self: "pod-c", ctrls: []string{"bravo"},
			events: append(append(announcing(0, 4*sec, "pod-a", 10, "bravo"), announcing(0, 4*sec, "pod-b", 20, "bravo")...),
				synced(0), joins(0), leased(0, "bravo", "pod-a", 3),
				handing(1100*ms, "bravo", "pod-a", "pod-d", 4), deleted(1200*ms, "bravo", 5)),
			looks: []look{{1300 * ms, []string{"acquire bravo over 5"}}}},
		{name: "hand over: the receiver ends the record once it holds the controller", self: "pod-c", ctrls: []string{"bravo"},
			events: append(announcing(0, 2*sec, "pod-a", 10, "bravo"), synced(0), joins(0), leased(0, "bravo", "pod-a", 3),
				handing(1100*ms, "bravo", "pod-a", "pod-c", 4), deleted(1200*ms, "bravo", 5), holds(1300*ms, "bravo", 6)),
			looks: []look{{1250 * ms, []string{"acquire bravo over 5"}}, {1300 * ms, []string{"end hand-over of bravo at 4"}}}},
	}
}

// otherRows: adoptions, releases, the watch.
func otherRows() []tableRow {
	sec := time.Second
	return []tableRow{
		{name: "adopt: an acquisition whose reply was lost, seen in the bucket", self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), joins(0), attempts(1100*ms, "alpha", "x"),
				seen(1150*ms, leaseKey("alpha"), 3, leaseRecord{Instance: "pod-a", Controller: "alpha", ID: "x", Since: t0})},
			// Its deadline runs from when it was sent: 1.1 s + 3 s - 0.6 s.
			looks: []look{{1200 * ms, []string{"adopt alpha at 3 until 3.5s"}}, {1300 * ms, nil}}},
		{name: "adopt: not an acquisition another replica's write beat", self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), joins(0), announced(0, "pod-b", 1, "alpha"), attempts(1100*ms, "alpha", "x"),
				leased(1150*ms, "alpha", "pod-b", 3)},
			looks: []look{{1200 * ms, nil}}},
		{name: "release: a controller removed from the configuration is let go", self: "pod-a", ctrls: []string{"alpha", "bravo"},
			events: []happening{synced(0), joins(0), holds(0, "alpha", 2), holds(0, "bravo", 3), configures(1*sec, "bravo")},
			looks:  []look{{500 * ms, nil}, {1 * sec, []string{"remove alpha"}}}},
		{name: "release: a lease let go is not taken again before its controller stopped", self: "pod-a", ctrls: []string{"alpha"},
			events: []happening{synced(0), joins(0), holds(0, "alpha", 2), letsGo(1*sec, "alpha"), deleted(1100*ms, "alpha", 3),
				stopped(1200*ms, "alpha")},
			looks: []look{{1100 * ms, nil}, {1200 * ms, []string{"acquire alpha over 3"}}}},
		{name: "watch: behind when it has not delivered our announcement a renew period after its answer",
			self: "pod-a", ctrls: nil,
			events: []happening{synced(0), joins(0), announced(0, "pod-a", 8), answered(100*ms, 10), announced(1200*ms, "pod-a", 10)},
			looks:  []look{{1099 * ms, nil}, {1100 * ms, []string{"watch behind"}}, {1200 * ms, nil}}},
	}
}

// TestAHeldLeaseEnds: a lease this replica holds is let go when another replica took its key,
// or a lease time after it ran out (or when its own clock ended it); until then a lease that
// ran out is kept, fenced, for a renewal to regain.
func TestAHeldLeaseEnds(t *testing.T) {
	endings := map[ending]string{keeps: "kept", lost: "lost", expired: "expired"}
	tb := newTable("pod-a", rowTTL, nil)
	now := t0.Add(10 * time.Second)
	for _, c := range []struct {
		name   string
		taken  bool
		ranOut time.Duration // before now; 0: has not run out
		ended  bool
		want   ending
	}{
		{"renewed in time", false, 0, false, keeps},
		{"taken by another replica", true, 0, false, lost},
		{"ran out, a renewal may regain it", false, 2999 * ms, false, keeps},
		{"ran out a lease time ago", false, rowTTL, false, expired},
		{"ran out, ended by its own clock", false, 10 * ms, true, expired},
		{"taken after it ran out", true, rowTTL, false, lost},
	} {
		at := time.Time{}
		if c.ranOut > 0 {
			at = now.Add(-c.ranOut)
		}
		if got := tb.ends(c.taken, at, c.ended, now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, endings[got], endings[c.want])
		}
	}
}
