package forwarder

// Locating the boundary between published and new events over a journal in memory.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
)

// TestAnUndecodableEventAtThePositionsInstantHidesNoTieBeforeIt: events written at the
// position's instant after it took that instant are new, and the journal may list them before
// an undecodable event published earlier, which takes their instant as its date (it has none of
// its own). Wherever locate starts, the boundary is before the first of them: placed after the
// undecodable event, reading could not prove its first page contiguous and resynchronised on
// every cycle for as long as the journal held still (found by the property, seed
// 1796201145369648464).
func TestAnUndecodableEventAtThePositionsInstantHidesNoTieBeforeIt(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := func(id string, c time.Time) string {
		return fmt.Sprintf(`{"id":%q,"type":"info","message":"m","created":%q,"entities":[{"entity_uuid":"u","entity_class":"domain"}]}`, id, c.Format(time.RFC3339Nano))
	}
	oldestFirst := []string{
		ev("old-1", at.Add(-2*time.Millisecond)), ev("old-2", at.Add(-time.Millisecond)),
		ev("tie-a", at), ev("tie-b", at), // published
		ev("tie-c", at), ev("tie-d", at), // written at that instant later: new
		`{"id":"odd","type":"info","message":"m","created":"not a time"}`, // published
		ev("new-1", at.Add(time.Millisecond)), ev("new-2", at.Add(2*time.Millisecond)),
	}
	newestFirst := slices.Clone(oldestFirst)
	slices.Reverse(newestFirst)
	for _, tt := range []struct {
		order  string
		events []string
		want   int // the boundary: oldest first the first new event, newest first the first published
	}{
		{"oldest_first", oldestFirst, 4},
		{"newest_first", newestFirst, 5},
	} {
		for page := minPage; page <= 6; page++ {
			for hint := range len(tt.events) + 1 {
				fw := locateRig(t, &journal{events: tt.events}, tt.order, page)
				fw.reader.hint = hint
				pos := position{Created: at, IDs: []string{"tie-a", "tie-b"}, Odd: []string{"odd"}, Known: true}
				bd, err := fw.reader.locate(context.Background(), &pos)
				if err != nil {
					t.Fatal(err)
				}
				if bd.b != tt.want {
					t.Errorf("%s, page %d, locating from %d: boundary %d, want %d", tt.order, page, hint, bd.b, tt.want)
				}
			}
		}
	}
}

// offlineForwarder is a forwarder with neither NATS nor a controller behind it: the caller gives
// it a pager (and a publisher and stream reader when it publishes). Messages are at most limit
// bytes (0: NATS's default).
func offlineForwarder(t *testing.T, ev config.Events, concurrency, limit int, cp checkpoint) *Forwarder {
	t.Helper()
	cli, err := veil.New(veil.Config{URL: "http://127.0.0.1:1", Token: "jwt x"})
	if err != nil {
		t.Fatal(err)
	}
	st := &Stream{conn: &natsconn.Conn{}, cfg: config.Default().NATS}
	if limit > 0 {
		st.maxMsgSize.Store(int64(limit))
	}
	fw, err := newForwarder(Options{Controller: "prod", ControllerURL: "https://veil", Client: cli, Events: ev, Stream: st, Concurrency: concurrency}, cp)
	if err != nil {
		t.Fatal(err)
	}
	return fw
}

// locateRig is a forwarder that reads pages of j, in order, page rows at a time.
func locateRig(t *testing.T, j *journal, order string, page int) *Forwarder {
	t.Helper()
	ev := config.Default().Events
	ev.Order, ev.Start, ev.PageSize = order, "earliest", page
	fw := offlineForwarder(t, ev, 0, 0, &memCheckpoint{})
	fw.reader.pager = j
	return fw
}
