package forwarder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestMessageSubjectHeadersAndBody(t *testing.T) {
	raw := `{"id":"e1","type":"warning","created":"2021-08-20T10:08:09.761081Z","extra":{"kept":true},"entities":[{"entity_uuid":"u-1","entity_class":"domain"}]}`
	tests := []struct {
		name        string
		controller  string
		ev          veil.Event
		wantSubject string
		wantSubj    string
	}{
		{"entity class is the last token", "prod", veil.Event{ID: "e1", Type: "warning", Entities: []veil.EventEntity{{UUID: "u-1", Class: "domain"}}}, "veil.events.prod.warning.domain", "u-1"},
		{"no entity gives none and no ce-subject", "prod", veil.Event{ID: "e1", Type: "info"}, "veil.events.prod.info.none", ""},
		{"dots, wildcards and spaces are sanitized, empty is unknown", "dc 1.prod", veil.Event{ID: "e1", Type: "", Entities: []veil.EventEntity{{Class: "a*b>c"}}}, "veil.events.dc_1_prod.unknown.a_b_c", ""},
	}
	created, _ := time.Parse(time.RFC3339Nano, "2021-08-20T13:08:09.761081+03:00") // the body's instant, another zone
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ev.Raw = json.RawMessage(raw)
			tt.ev.Created = veil.Time{Time: created}
			pos := position{}
			pos.advance(tt.ev.Created.Time, tt.ev.ID)
			m, _ := (&envelope{prefix: "veil.events", controller: tt.controller, source: "https://veil.example.com", order: oldestFirst}).message(&tt.ev, &pos)
			if m.Subject != tt.wantSubject {
				t.Errorf("subject %q, want %q", m.Subject, tt.wantSubject)
			}
			if string(m.Data) != raw {
				t.Errorf("body changed: %s", m.Data)
			}
			want := map[string]string{
				nats.MsgIdHdr: tt.controller + ".e1", "ce-id": ceHeader(tt.controller + ".e1"), "Content-Type": "application/json",
				"ce-specversion": "1.0", "ce-source": "https://veil.example.com", "ce-type": "veil.events." + tt.ev.Type,
				"ce-time": "2021-08-20T10:08:09.761081Z", "ce-subject": tt.wantSubj, "ce-datacontenttype": "application/json",
			}
			for k, v := range want {
				if got := m.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestFileCheckpointRoundTripAndAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	cp, err := newFileCheckpoint(dir, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cp.Load(context.Background()); ok || err != nil {
		t.Fatalf("empty store: ok=%v err=%v", ok, err)
	}
	want := position{Created: time.Date(2021, 8, 20, 10, 8, 9, 761081000, time.UTC), IDs: []string{"a", "b"}, Known: true, Ahead: 3, TailID: "z"}
	for i := range 3 {
		want.Ahead = i
		if err := cp.Save(context.Background(), want); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := cp.Load(context.Background())
	if err != nil || !ok || !got.Created.Equal(want.Created) || strings.Join(got.IDs, ",") != "a,b" || got.Ahead != 2 {
		t.Fatalf("got %+v ok=%v err=%v", got, ok, err)
	}
}

// TestSecondInstanceLosesTheKVPosition proves the nats_kv store's compare-and-set: an instance
// whose revision is stale cannot move the position and stops forwarding.
func TestSecondInstanceLosesTheKVPosition(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	ctx := context.Background()
	a, err := newKVCheckpoint(r.stream, "prod")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newKVCheckpoint(r.stream, "prod")
	if _, _, err := a.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, position{Known: true, IDs: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(ctx, position{Known: true, IDs: []string{"y"}}); !errors.Is(err, errCheckpointConflict) {
		t.Fatalf("stale writer: err=%v, want errCheckpointConflict", err)
	}
	if err := a.Save(ctx, position{Known: true, IDs: []string{"x2"}}); err != nil {
		t.Fatalf("owner keeps writing: %v", err)
	}

	// A running forwarder whose position is written by another instance stops with the conflict.
	r.sim.AddEvents(10, veiltest.EventSpec{})
	fw, err := newForwarder(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream, Logger: log.NewNopLogger()}, b)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fw.Run(cctx) }()
	testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published >= 10 }, "10 events published")
	// A second instance takes the position over while the first one runs.
	c, _ := newKVCheckpoint(r.stream, "prod")
	p, _, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx, p); err != nil {
		t.Fatal(err)
	}
	r.sim.AddEvents(5, veiltest.EventSpec{})
	if err := <-done; !errors.Is(err, errCheckpointConflict) {
		t.Fatalf("Run: %v, want errCheckpointConflict", err)
	}
	if !fw.Status().Stopped {
		t.Fatal("status does not say the forwarder stopped")
	}
}

// TestMetricsAfterPublishing checks the veil_events_* series after a known number of events.
func TestMetricsAfterPublishing(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "newest_first", InitialTasks: -1}, "auto", "earliest")
	rec := subscribe(t, r.nats.URL())
	r.sim.AddEvents(4, veiltest.EventSpec{Type: "error", EntityClass: "none"})
	r.sim.AddEvents(3, veiltest.EventSpec{Type: "error", EntityClass: "node"})
	fw, stop := r.run()
	t.Cleanup(stop)
	rec.waitFor(t, 7, 10*time.Second)
	testutil.Eventually(t, 5*time.Second, func() bool { return fw.Status().Published == 7 }, "7 events published")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(fw); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	series := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			series++
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "controller" {
					key += "," + l.GetName() + "=" + l.GetValue()
				} else if l.GetValue() != "prod" {
					t.Errorf("%s has controller=%q", mf.GetName(), l.GetValue())
				}
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"veil_events_published_total,entity_class=none,type=error": 4,
		"veil_events_published_total,entity_class=node,type=error": 3,
		"veil_events_backlog":                  0,
		"veil_events_gaps_total":               0,
		"veil_events_gap_episodes_total":       0,
		"veil_events_duplicates_total":         0,
		"veil_events_publish_errors_total":     0,
		"veil_nats_connected":                  1,
		"veil_events_publish_conflicts_total":  0,
		"veil_events_position_adoptions_total": 0,
		"veil_events_rewinds_total":            0,
		"veil_events_republished_total":        0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if got["veil_events_last_published_timestamp_seconds"] <= 0 {
		t.Errorf("timestamp not set: %v", got)
	}
	if _, ok := got["veil_events_position_timestamp_seconds"]; ok {
		t.Errorf("veil_events_position_timestamp_seconds is still exported (it equalled last_published)")
	}
	if series != 20 { // 15, and veil_events_rejected_total at 0 for each of its 5 reasons
		t.Errorf("%d series, want 20: %v", series, got)
	}
	// The cycle that published the events ends (and is recorded) just after the acknowledgements.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		rs := fw.RunStatus()
		if len(rs) != 1 || rs[0].Collector != "events" || !rs[0].Success || rs[0].LastSuccess.IsZero() || rs[0].Error != "" {
			return fmt.Errorf("RunStatus() = %+v", rs)
		}
		return nil
	}, "one successful events run")
	st := fw.Status()
	if st.Order != "oldest_first" || st.Position.IsZero() || !st.NATS.Connected || st.LastAcked.IsZero() {
		t.Errorf("status %+v", st)
	}
}

// TestEntityClassLabelIsCapped proves the entity_class label: none without an entity, sanitized
// like the subject token, and other once maxEntityClasses distinct values are in use.
func TestEntityClassLabelIsCapped(t *testing.T) {
	fw := &Forwarder{obs: &observer{classes: map[string]bool{}}}
	ev := func(class string) *veil.Event {
		return &veil.Event{Entities: []veil.EventEntity{{Class: class}}}
	}
	if got := fw.obs.classLabel(&veil.Event{}); got != "none" {
		t.Errorf("no entity: %q, want none", got)
	}
	if got := fw.obs.classLabel(ev("a.b c")); got != "a_b_c" {
		t.Errorf("sanitized: %q, want a_b_c", got)
	}
	for i := len(fw.obs.classes); i < maxEntityClasses; i++ {
		if got, want := fw.obs.classLabel(ev(fmt.Sprint("c", i))), fmt.Sprint("c", i); got != want {
			t.Fatalf("class %d: %q, want %q", i, got, want)
		}
	}
	if got := fw.obs.classLabel(ev("one_too_many")); got != "other" {
		t.Errorf("past the cap: %q, want other", got)
	}
	if got := fw.obs.classLabel(ev("a.b c")); got != "a_b_c" {
		t.Errorf("a class in use stays after the cap: %q", got)
	}
}

// TestCoreNATSAtMostOnce publishes without JetStream: every event reaches a plain subscriber.
func TestCoreNATSAtMostOnce(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	nc := r.nc
	nc.JetStream.Enabled = false
	conn, err := natsconn.Connect(nc, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	sub, err := nats.Connect(r.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch := make(chan *nats.Msg, 100)
	if _, err := sub.ChanSubscribe("veil.events.prod.>", ch); err != nil {
		t.Fatal(err)
	}
	sub.Flush()
	want := r.sim.AddEvents(20, veiltest.EventSpec{})
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: NewStream(conn, nc, 1, nil), Logger: log.NewNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go fw.Run(ctx)
	for i, id := range want {
		select {
		case m := <-ch:
			if m.Header.Get(nats.MsgIdHdr) != "prod."+id {
				t.Fatalf("message %d is %s, want %s", i, m.Header.Get(nats.MsgIdHdr), id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d events arrived", i, len(want))
		}
	}
}

// TestStatusListsRecentEventsNewestFirst proves Status.Recent holds the last acknowledged events,
// newest first, bounded to 20, with their subjects, and Status.Subject is the controller's filter.
func TestStatusListsRecentEventsNewestFirst(t *testing.T) {
	tests := []struct {
		name   string
		events int
	}{
		{"fewer events than the list holds", 7},
		{"more events than the list holds keeps the newest 20", 45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
			r.ev.PollInterval = 20 * time.Millisecond
			r.nc.JetStream.MaxPending = 8 // several batches, so the ring wraps across publishes
			ids := r.sim.AddEvents(tt.events, veiltest.EventSpec{Type: "warning"})
			fw, stop := r.run()
			t.Cleanup(stop)
			testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published >= uint64(tt.events) }, "%d events published", tt.events)
			st := fw.Status()
			if st.Subject != "veil.events.prod.>" {
				t.Errorf("subject %q", st.Subject)
			}
			n := min(tt.events, 20)
			if len(st.Recent) != n {
				t.Fatalf("%d recent events, want %d", len(st.Recent), n)
			}
			for i, e := range st.Recent {
				want := ids[len(ids)-1-i]
				if e.ID != want || e.Type != "warning" || e.Created.IsZero() || !strings.HasPrefix(e.Subject, "veil.events.prod.warning.") {
					t.Errorf("recent[%d] = %+v, want id %s", i, e, want)
				}
				if i > 0 && e.Created.After(st.Recent[i-1].Created) {
					t.Errorf("recent[%d] is newer than recent[%d]", i, i-1)
				}
			}
		})
	}
}

// TestPositionStopsAtTheFirstUnacknowledgedEvent proves that with several batches in flight the
// position (in memory and stored) advances exactly to the last event acknowledged together with
// all earlier ones when the stream starts refusing messages, and that nothing is lost or
// duplicated once it accepts them again.
func TestPositionStopsAtTheFirstUnacknowledgedEvent(t *testing.T) {
	const accepted, total = 47, 140
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "oldest_first", "earliest")
	r.ev.PollInterval = 20 * time.Millisecond
	r.nc.JetStream.MaxPending = 20 // batches of 5, several in flight when the stream fills up
	js := testutil.JetStream(t, r.nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	limit := func(maxMsgs int64) {
		t.Helper()
		if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "VEIL_EVENTS", Subjects: []string{"veil.events.>"},
			Duplicates: time.Hour, Storage: jetstream.FileStorage, MaxMsgs: maxMsgs, Discard: jetstream.DiscardNew}); err != nil {
			t.Fatal(err)
		}
	}
	limit(accepted)
	ids := r.sim.AddEvents(total, veiltest.EventSpec{})
	fw, stop := r.run()
	defer stop()
	testutil.Eventually(t, 20*time.Second, func() bool {
		fw.obs.mu.Lock()
		defer fw.obs.mu.Unlock()
		return fw.obs.run.lastErr != "" && fw.obs.pubErrors >= 3
	}, "a few refused publishes")
	st := fw.Status()
	if st.Published != accepted || len(st.PositionIDs) == 0 || st.PositionIDs[len(st.PositionIDs)-1] != ids[accepted-1] {
		t.Fatalf("published %d up to %v, want %d up to %s (error %q)", st.Published, st.PositionIDs, accepted, ids[accepted-1], st.LastError)
	}
	cp, _ := newFileCheckpoint(r.ev.Checkpoint.Dir, "prod")
	stored, ok, err := cp.Load(ctx)
	if err != nil || !ok || !stored.Created.Equal(st.Position) || stored.IDs[len(stored.IDs)-1] != ids[accepted-1] {
		t.Fatalf("stored position %+v (ok %v, err %v), want the %d-th event", stored, ok, err, accepted)
	}
	limit(-1)
	rec := subscribe(t, r.nats.URL())
	exactlyOnceInOrder(t, "prod", ids, rec.waitFor(t, total, 15*time.Second))
}

// TestEventSourceCarriesNoCredentials: ce-source goes to every subscriber of the stream, so the
// userinfo of a controller URL must not reach it; the rest of the URL is kept as written.
func TestEventSourceCarriesNoCredentials(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain URL unchanged", "https://veil.example.com", "https://veil.example.com"},
		{"user and password stripped", "https://admin:s3cret@veil.example.com", "https://veil.example.com"},
		{"user only stripped", "https://admin@veil.example.com:8443/api", "https://veil.example.com:8443/api"},
		{"escaped @ in the password", "https://admin:p%40ss@veil.example.com/", "https://veil.example.com/"},
		{"raw @ in the password", "https://admin:p@ss@veil.example.com", "https://veil.example.com"},
		{"@ in path and query kept", "https://veil.example.com/a@b?x=c@d#e@f", "https://veil.example.com/a@b?x=c@d#e@f"},
		{"unparseable URL cut too", "https://admin:s3cret%zz@veil example.com", "https://veil example.com"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := eventSource(tt.in); got != tt.want {
				t.Errorf("eventSource(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}

	t.Run("published ce-source", func(t *testing.T) {
		r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
		rec := subscribe(t, r.nats.URL())
		r.sim.AddEvents(3, veiltest.EventSpec{})
		host := strings.TrimPrefix(r.sim.URL, "http://")
		fw, err := New(Options{Controller: "prod", ControllerURL: "http://admin:s3cret@" + host, Client: r.cli, Events: r.ev, Stream: r.stream})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- fw.Run(ctx) }()
		defer func() { cancel(); <-done }()
		if got := rec.waitFor(t, 3, 10*time.Second); len(got) != 3 {
			t.Fatalf("received %d events, want 3", len(got))
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, m := range rec.msgs {
			if got := m.Headers().Get("ce-source"); got != r.sim.URL {
				t.Errorf("ce-source %q, want %q", got, r.sim.URL)
			}
			for k, vs := range m.Headers() {
				for _, v := range vs {
					if strings.Contains(v, "s3cret") || strings.Contains(v, "admin") {
						t.Errorf("header %s carries the credentials: %q", k, v)
					}
				}
			}
		}
	})
}

// TestRepublishedEventIsDroppedByTheStream proves that the Nats-Msg-Id header message() sets is
// the second line behind the expectation: the same events published again right after themselves
// (the expectation holds: as after their messages were deleted within the duplicate window) are
// acknowledged as duplicates and stored once.
func TestRepublishedEventIsDroppedByTheStream(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	fw := r.forwarder()
	events := []veil.Event{{ID: "e1", Type: "info", Raw: json.RawMessage(`{"id":"e1"}`)}, {ID: "e2", Type: "error", Raw: json.RawMessage(`{"id":"e2"}`)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last uint64
	for round := range 2 {
		n, seq, err := fw.out.pub.publish(ctx, messagesOf(fw, events), last)
		if err != nil || n != len(events) {
			t.Fatalf("round %d: acknowledged %d, %v", round, n, err)
		}
		if round == 1 && seq != last {
			t.Fatalf("round %d: duplicates moved the expected sequence from %d to %d", round, last, seq)
		}
		last = seq
	}
	s, err := r.stream.js.Stream(ctx, "VEIL_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(events)) {
		t.Fatalf("stream holds %d messages after publishing %d events twice, want %d", info.State.Msgs, len(events), len(events))
	}
}
