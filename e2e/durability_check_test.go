package e2e

// This file holds the durability suite's checker, in the manner of Jepsen's: it judges the
// history, not the code. At the end of a row it reads everything the stream holds, groups it by
// controller and classifies every event id of the controller's journal: ok (on the stream once,
// after everything before it), lost, duplicated, or out of order; ids on the stream that the
// journal does not hold are counted too. One table line per row; any non-ok fails the row.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// verdict is the checker's classification of one controller's history.
type verdict struct {
	checked    int      // journal ids judged
	ok         int      // once on the stream, after every id the journal has before it
	lost       []string // in the journal, not on the stream
	duplicated []string // on the stream more than once
	outOfOrder []string // once or more, but first stored before an id the journal has earlier
	foreign    []string // on the stream, not in the journal
}

func (v verdict) clean() bool {
	return v.ok == v.checked && len(v.foreign) == 0
}

// classify judges a controller's stream (event ids in stream order) against its journal (ids
// oldest first). An id is out of order when its first copy on the stream comes after the first
// copy of an id the journal holds later; a duplicated id counts as duplicated only.
func classify(journal, stream []string) verdict {
	pos := make(map[string]int, len(journal))
	for i, id := range journal {
		pos[id] = i
	}
	copies := map[string]int{}
	late := map[string]bool{}
	highest := -1 // journal position of the furthest id stored so far
	for _, id := range stream {
		copies[id]++
		p, known := pos[id]
		if !known || copies[id] > 1 {
			continue
		}
		if p < highest {
			late[id] = true
		}
		highest = max(highest, p)
	}
	v := verdict{checked: len(journal)}
	for _, id := range journal {
		switch {
		case copies[id] == 0:
			v.lost = append(v.lost, id)
		case copies[id] > 1:
			v.duplicated = append(v.duplicated, id)
		case late[id]:
			v.outOfOrder = append(v.outOfOrder, id)
		default:
			v.ok++
		}
	}
	for _, id := range stream {
		if _, known := pos[id]; !known {
			v.foreign = append(v.foreign, id)
		}
	}
	return v
}

// readWholeStream reads every message the stream holds, in stream order, and groups the event
// ids (from Nats-Msg-Id, <controller>.<id>) by controller.
func readWholeStream(t testing.TB, js jetstream.JetStream, stream string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range readStreamMsgs(t, js, stream) {
		ctrl, id, ok := strings.Cut(m.Headers().Get(nats.MsgIdHdr), ".")
		if !ok {
			t.Errorf("a message without a <controller>.<id> Nats-Msg-Id: %q", m.Headers().Get(nats.MsgIdHdr))
			continue
		}
		out[ctrl] = append(out[ctrl], id)
	}
	return out
}

// readStreamMsgs reads every message the stream holds, in stream order. Deleted sequences are
// skipped; a read that fails (a cluster just restarted) is started over.
func readStreamMsgs(t testing.TB, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	var out []jetstream.Msg
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		// Right after a partition heals, the node that led the stream before the cut may still
		// answer as its leader, with what it held then: read only once every replica is current.
		if c := info.Cluster; c != nil {
			for _, r := range c.Replicas {
				if !r.Current || r.Lag > 0 || r.Offline {
					return fmt.Errorf("replica %s of %s not caught up (leader %s): current %v, lag %d", r.Name, stream, c.Leader, r.Current, r.Lag)
				}
			}
		}
		n := int(info.State.Msgs)
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		out = out[:0]
		for len(out) < n {
			batch, err := cons.Fetch(min(n-len(out), 500), jetstream.FetchMaxWait(3*time.Second))
			if err != nil {
				return err
			}
			before := len(out)
			for m := range batch.Messages() {
				out = append(out, m)
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if len(out) == before {
				return fmt.Errorf("read %d of %d messages, then nothing", len(out), n)
			}
		}
		return nil
	}, "the whole stream %s", stream)
	return out
}

// streamLeader names the server that answers for the stream's leader now ("?" when none does).
func streamLeader(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "?"
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return "?"
	}
	return info.Cluster.Leader
}

// history is what a row measured besides the checker's verdict.
type history struct {
	faults    int           // faults injected (kills, cuts, pauses, ...)
	rewinds   float64       // veil_events_rewinds_total, summed over the exporter's lives
	conflicts float64       // veil_events_publish_conflicts_total, likewise
	ended     time.Time     // when the last fault ended (its process restarted, woken, space back)
	recovered time.Duration // from then to the whole journal on the stream
}

// durabilityTable collects the rows' lines and prints them together when the suite ends.
type durabilityTable struct {
	mu    sync.Mutex
	lines []string
}

const durabilityHeader = "DURABILITY row                                   | faults | checked |    ok | lost | dup | disorder | foreign | rewinds | conflicts | recovered"

func (d *durabilityTable) add(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines = append(d.lines, line)
}

func (d *durabilityTable) print(t *testing.T) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t.Log("\n" + durabilityHeader + "\n" + strings.Join(d.lines, "\n"))
}

// judge reads the whole stream, classifies the journal of controller, adds the row's line to
// the table and fails the row on any non-ok.
func judge(t *testing.T, table *durabilityTable, row string, js jetstream.JetStream, controller string, journal []string, h history) {
	t.Helper()
	got := readWholeStream(t, js, faultStream)
	v := classify(journal, got[controller])
	// Right after a partition heals, the node that led the stream before the cut may still answer
	// as its leader for a moment, with what it held then (seen after a minority cut: the ids
	// published to the majority missing, the next read complete). Events lost for good stay lost
	// however often the stream is read again; so read again, for a while, until none is missing.
	for deadline := time.Now().Add(30 * time.Second); len(v.lost) > 0 && time.Now().Before(deadline); {
		t.Logf("%s: %d of %d journal ids missing from this read of the stream (leader %s); reading again", row, len(v.lost), v.checked, streamLeader(js, faultStream))
		got = readWholeStream(t, js, faultStream)
		v = classify(journal, got[controller])
	}
	for c, ids := range got {
		if c != controller {
			v.foreign = append(v.foreign, ids...)
		}
	}
	line := fmt.Sprintf("DURABILITY %-36s | %6d | %7d | %5d | %4d | %3d | %8d | %7d | %7.0f | %9.0f | %v",
		row, h.faults, v.checked, v.ok, len(v.lost), len(v.duplicated), len(v.outOfOrder), len(v.foreign),
		h.rewinds, h.conflicts, h.recovered.Round(10*time.Millisecond))
	table.add(line)
	t.Log(line)
	if !v.clean() {
		t.Errorf("%s: not every journal id once and in order: lost %d %v, duplicated %d %v, out of order %d %v, foreign %d %v",
			row, len(v.lost), first(v.lost), len(v.duplicated), first(v.duplicated),
			len(v.outOfOrder), first(v.outOfOrder), len(v.foreign), first(v.foreign))
	}
}

// TestClassify proves the checker can fail: each kind of wrong history is named as such.
func TestClassify(t *testing.T) {
	journal := []string{"a", "b", "c", "d"}
	for _, c := range []struct {
		name                        string
		stream                      []string
		ok, lost, dup, late, foreig int
	}{
		{"all once in order", []string{"a", "b", "c", "d"}, 4, 0, 0, 0, 0},
		{"one lost", []string{"a", "c", "d"}, 3, 1, 0, 0, 0},
		{"one resent after a lost ack", []string{"a", "b", "b", "c", "d"}, 3, 0, 1, 0, 0},
		{"a rewind that republished", []string{"a", "b", "c", "b", "c", "d"}, 2, 0, 2, 0, 0},
		{"two swapped", []string{"a", "c", "b", "d"}, 3, 0, 0, 1, 0},
		{"an id the journal lacks", []string{"a", "b", "x", "c", "d"}, 4, 0, 0, 0, 1},
	} {
		v := classify(journal, c.stream)
		if v.ok != c.ok || len(v.lost) != c.lost || len(v.duplicated) != c.dup || len(v.outOfOrder) != c.late || len(v.foreign) != c.foreig {
			t.Errorf("%s: %+v", c.name, v)
		}
		if v.clean() != (c.ok == 4 && c.foreig == 0) {
			t.Errorf("%s: clean() is %v", c.name, v.clean())
		}
	}
}
