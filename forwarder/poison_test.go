package forwarder

// Events the controller sends on a bad day (DESIGN §8): each costs only itself, is counted and
// said, and every event after it still goes out once and in order. The journal is served from
// memory (journal) so that any bytes at all can be put in it; NATS is a real server.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/veil-exporter/veil-exporter/config"
	itest "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
)

// journal is an event journal in memory, oldest first, served as the platform's pages.
type journal struct {
	mu     sync.Mutex
	events []string // raw JSON of each result
	n      int      // events added by good()
	base   time.Time
}

func (j *journal) pageBody(_ context.Context, offset, limit int, _ string) ([]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	end := min(len(j.events), offset+limit)
	start := min(offset, end)
	return fmt.Appendf(nil, `{"count":%d,"next":null,"previous":null,"results":[%s]}`, len(j.events), strings.Join(j.events[start:end], ",")), nil
}

// good adds n ordinary events a microsecond apart and returns their ids.
func (j *journal) good(n int) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	ids := make([]string, n)
	for i := range n {
		j.n++
		ids[i] = fmt.Sprintf("good-%05d", j.n)
		j.events = append(j.events, fmt.Sprintf(`{"id":%q,"type":"info","message":"m","created":%q,"entities":[{"entity_uuid":"u","entity_class":"domain"}]}`,
			ids[i], j.next().Format(time.RFC3339Nano)))
	}
	return ids
}

// next is the created of the next event: a microsecond after the one before.
func (j *journal) next() time.Time {
	return j.base.Add(time.Duration(len(j.events)) * time.Microsecond).UTC()
}

// ties adds n ordinary events sharing one created instant and returns their ids.
func (j *journal) ties(n int) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	at := j.next().Format(time.RFC3339Nano)
	ids := make([]string, n)
	for i := range n {
		j.n++
		ids[i] = fmt.Sprintf("tie-%05d", j.n)
		j.events = append(j.events, fmt.Sprintf(`{"id":%q,"type":"info","created":%q}`, ids[i], at))
	}
	return ids
}

// goodBeforeLast adds n ordinary events before the last event of the journal (one dated later
// than them: ordering by created lists them before it) and returns their ids.
func (j *journal) goodBeforeLast(n int) []string {
	last := j.events[len(j.events)-1]
	j.mu.Lock()
	j.events = j.events[:len(j.events)-1]
	j.mu.Unlock()
	ids := j.good(n)
	j.mu.Lock()
	j.events = append(j.events, last)
	j.mu.Unlock()
	return ids
}

// add appends one raw result (its created, where it has one, is next()).
func (j *journal) add(raw string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, strings.ReplaceAll(raw, "CREATED", j.next().Format(time.RFC3339Nano)))
}

// poisonRig is a forwarder over a journal, publishing to a real NATS server.
type poisonRig struct {
	j     *journal
	ns    *itest.NATS
	conn  *natsconn.Conn
	fw    *Forwarder
	logs  *syncBuf
	stops []func()
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newPoisonRig(t *testing.T) *poisonRig {
	t.Helper()
	ns := itest.StartNATS(t)
	nc := natsConfig(ns.URL())
	conn, err := natsconn.Connect(nc, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	cli, err := veil.New(veil.Config{URL: "http://127.0.0.1:1", Token: "jwt x"})
	if err != nil {
		t.Fatal(err)
	}
	ev := config.Default().Events
	ev.PollInterval = 50 * time.Millisecond
	ev.Order, ev.Start = "oldest_first", "earliest"
	ev.Checkpoint.Dir = t.TempDir()
	r := &poisonRig{j: &journal{base: time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)}, ns: ns, conn: conn, logs: &syncBuf{}}
	r.fw = r.start(t, NewStream(conn, nc, 1, nil), cli, ev)
	return r
}

// start runs a forwarder of controller prod over the rig's journal, with ev (a checkpoint
// directory of its own), until the test ends or the function it returns is called.
func (r *poisonRig) start(t *testing.T, stream *Stream, cli *veil.Client, ev config.Events) *Forwarder {
	t.Helper()
	fw, err := New(Options{Controller: "prod", ControllerURL: "https://veil", Client: cli, Events: ev,
		Stream: stream, Logger: log.NewLogfmtLogger(r.logs)})
	if err != nil {
		t.Fatal(err)
	}
	fw.reader.pager = r.j
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	r.stops = append(r.stops, stop)
	return fw
}

// stored reads every message of the stream, in order.
func (r *poisonRig) stored(t *testing.T) []jetstream.RawStreamMsg {
	t.Helper()
	nc, err := nats.Connect(r.ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // thousands of reads, under -race
	defer cancel()
	s, err := js.Stream(ctx, "VEIL_EVENTS")
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		out = append(out, *m)
	}
	return out
}

// waitStored waits until the stream holds n messages and returns them. The wait ends as soon
// as they are there; its bound says when they surely will not come (3,000 events of one instant
// read again under the race detector on one busy CPU took over 30 s), not how fast this is.
func (r *poisonRig) waitStored(t *testing.T, n int) []jetstream.RawStreamMsg {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	got := r.stored(t)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d messages, want %d; last error: %s; log:\n%.3000s", len(got), n, r.fw.Status().LastError, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the stream: nothing to wait on
		got = r.stored(t)
	}
	return got
}

func TestEventsThatCannotBePublishedAsTheyAreCostOnlyThemselves(t *testing.T) {
	r := newPoisonRig(t)
	var want []string // Nats-Msg-Id of every message, in order
	add := func(ids ...string) { want = append(want, ids...) }
	add(r.j.good(20)...)
	huge := strings.Repeat("x", 1536*1024) // over the server's max_payload of 1 MiB
	r.j.add(`{"id":"huge","type":"error","created":"CREATED","message":"disk full","detail_message":"` + huge + `","entities":[]}`)
	add("huge")
	longType := strings.Repeat("t", 5000) // a subject longer than the server's max_control_line
	r.j.add(`{"id":"long-type","type":"` + longType + `","created":"CREATED","entities":[{"entity_uuid":"u","entity_class":"` + strings.Repeat("c", 300) + `"}]}`)
	add("long-type")
	add(r.j.good(5)...)
	r.j.add(`{"type":"info","created":"CREATED","message":"no id"}`)
	add("?")
	r.j.add(`{"id":"bad-created","type":"info","created":"yesterday"}`)
	add("bad-created")
	r.j.add(`{"id":"null-created","type":"info","created":null}`)
	add("null-created")
	r.j.add(`{"id":7,"type":"info","created":"CREATED"}`)
	r.j.add(`"not an event"`)
	add("?", "?") // ids given by the forwarder (invalid-<hash>): read back from the stream below
	add(r.j.good(20)...)
	got := r.waitStored(t, len(want))

	var ids []string
	bySubject := map[string]int{}
	for _, m := range got {
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
		bySubject[m.Subject]++
		if headerBytes(m.Header)+len(m.Data) > 1<<20 {
			t.Errorf("message %s is %d bytes, over max_payload", m.Header.Get(nats.MsgIdHdr), headerBytes(m.Header)+len(m.Data))
		}
		for _, tok := range strings.Split(m.Subject, ".") {
			if len(tok) > maxTokenBytes {
				t.Errorf("subject token of %d bytes in %.80s…", len(tok), m.Subject)
			}
		}
	}
	for i := range want {
		if want[i] == "?" && i < len(ids) && strings.HasPrefix(ids[i], "prod.invalid-") {
			want[i] = strings.TrimPrefix(ids[i], "prod.")
		}
	}
	exactlyOnceInOrder(t, "prod", want, ids)
	checkCutAndLongType(t, got, longType)
	if n := bySubject["veil.events.prod.invalid"]; n != 5 {
		t.Errorf("%d messages on veil.events.prod.invalid, want 5 (no id, bad created, null created, id not a string, not an object)", n)
	}
	checkRejectionsTold(t, r)
	more := r.j.good(10)
	got = r.waitStored(t, len(want)+10)
	want = append(want, more...)
	ids = ids[:0]
	for _, m := range got {
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	exactlyOnceInOrder(t, "prod", want, ids)
}

// checkCutAndLongType: the huge event is published cut, with headers saying so, on its usual
// subject; the event of a long type on a subject cut and hashed, with its whole type in the body.
func checkCutAndLongType(t *testing.T, got []jetstream.RawStreamMsg, longType string) {
	t.Helper()
	for _, m := range got {
		switch id := m.Header.Get(nats.MsgIdHdr); id {
		case "prod.huge":
			if m.Header.Get(hdrRejected) != rejectTooLarge || m.Header.Get(hdrOriginalSize) == "" || !strings.Contains(m.Header.Get(hdrCutFields), "detail_message") {
				t.Errorf("huge: headers %v", m.Header)
			}
			var body map[string]any
			if err := json.Unmarshal(m.Data, &body); err != nil || body["id"] != "huge" || body["message"] != "disk full" {
				t.Errorf("huge: body is not the event cut (%v): %.200s", err, m.Data)
			}
			if m.Subject != "veil.events.prod.error.none" {
				t.Errorf("huge: subject %s", m.Subject)
			}
		case "prod.long-type":
			if m.Header.Get(hdrRejected) != rejectLongToken || !strings.HasPrefix(m.Subject, "veil.events.prod.ttt") {
				t.Errorf("long type: subject %.100s, headers %v", m.Subject, m.Header.Get(hdrRejected))
			}
			if string(m.Data) == "" || !strings.Contains(string(m.Data), longType) {
				t.Errorf("long type: the body must keep the whole type")
			}
		}
	}
}

// checkRejectionsTold: the events rejected are counted by reason, logged once each and listed on
// the status page, and NATS is still connected.
func checkRejectionsTold(t *testing.T, r *poisonRig) {
	t.Helper()
	wantCounts := map[string]float64{rejectTooLarge: 1, rejectLongToken: 1, rejectNoID: 2, rejectBadCreated: 2, rejectNotObject: 1}
	for reason, n := range wantCounts {
		if got := r.fw.Status().Rejected[reason]; float64(got) != n {
			t.Errorf("rejected %s = %d, want %v", reason, got, n)
		}
	}
	if n := testutil.CollectAndCount(r.fw, "veil_events_rejected_total"); n != len(wantCounts) {
		t.Errorf("veil_events_rejected_total has %d series, want %d", n, len(wantCounts))
	}
	if n := strings.Count(r.logs.String(), "event cannot be published as the controller sent it"); n != 7 {
		t.Errorf("%d warn lines for rejected events, want 7:\n%s", n, r.logs.String())
	}
	if len(r.fw.Status().RecentRejected) != 7 {
		t.Errorf("status lists %d rejected events, want 7", len(r.fw.Status().RecentRejected))
	}
	if !r.conn.Connected() {
		t.Error("NATS disconnected")
	}
}

// TestHeadersStayBoundedWhateverTheEventsAtOneInstant publishes thousands of events sharing one
// instant: no message carries more than a few KiB of headers, and a forwarder that starts from the
// stream alone (no stored position) reads the instant's ids back from the stream and publishes
// only what is new, also new events of that same instant.
func TestHeadersStayBoundedWhateverTheEventsAtOneInstant(t *testing.T) {
	r := newPoisonRig(t)
	want := r.j.good(3)
	want = append(want, r.j.ties(3000)...)
	got := r.waitStored(t, len(want))
	maxHdr := 0
	var ids []string
	for _, m := range got {
		maxHdr = max(maxHdr, headerBytes(m.Header))
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	t.Logf("largest headers: %d bytes", maxHdr)
	if maxHdr > 4096 {
		t.Errorf("a message carries %d bytes of headers, want at most 4 KiB", maxHdr)
	}
	exactlyOnceInOrder(t, "prod", want, ids)
	last := got[len(got)-1]
	// Published in one batch after nothing: the instant's first message follows sequence 0 at most.
	if last.Header.Get(hdrCreatedCount) != "3000" || last.Header.Get(hdrInstantFrom) != "0" {
		t.Errorf("the last message says count %q, from sequence %q; want 3000 and 0", last.Header.Get(hdrCreatedCount), last.Header.Get(hdrInstantFrom))
	}
	r.stops[0]()

	// The same instant grows while no forwarder runs; a new one starts with no stored position.
	j := r.j
	j.mu.Lock()
	at := j.events[len(j.events)-1]
	j.mu.Unlock()
	var created struct{ Created string }
	_ = json.Unmarshal([]byte(at), &created)
	more := []string{"late-tie-1", "late-tie-2"}
	for _, id := range more {
		j.add(fmt.Sprintf(`{"id":%q,"type":"info","created":%q}`, id, created.Created))
	}
	more = append(more, j.good(5)...)
	want = append(want, more...)
	ev := r.fw.opts.Events
	ev.Checkpoint.Dir = t.TempDir()
	fw := r.start(t, r.fw.out.stream, r.fw.opts.Client, ev)
	got = r.waitStored(t, len(want))
	ids = ids[:0]
	for _, m := range got {
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	exactlyOnceInOrder(t, "prod", want, ids)
	itest.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published >= uint64(len(more)) }, "the new forwarder's count")
	if n := fw.Status().Published; n != uint64(len(more)) {
		t.Errorf("the new forwarder published %d events, want only the %d new ones (it must not send the instant's again)", n, len(more))
	}
}

// TestBoundBodyFitsWhateverTheText cuts bodies whose strings are escaped (encoded longer than
// their text), multi-byte or plain: each fits, stays JSON and keeps id, type and created.
func TestBoundBodyFitsWhateverTheText(t *testing.T) {
	for name, text := range map[string]string{
		"plain":     strings.Repeat("x", 200000),
		"escapes":   strings.Repeat(`\n\"\\`, 50000),
		"unicode":   strings.Repeat(`\u0444\u0430\u0439\u043b`, 20000),
		"cyrillic":  strings.Repeat("файл ", 40000),
		"html":      strings.Repeat("<&>", 60000),
		"control":   strings.Repeat(`\u0001`, 40000),
		"surrogate": strings.Repeat(`\ud83d\ude00`, 20000),
	} {
		t.Run(name, func(t *testing.T) {
			raw := []byte(`{"id":"e1","type":"info","created":"2026-11-27T08:00:00Z","message":"` + text + `","detail_message":"` + text + `","entities":[{"entity_uuid":"u"}]}`)
			if !json.Valid(raw) {
				t.Fatalf("test body is not JSON")
			}
			for _, budget := range []int{1024, 5000, 65536, len(raw) / 2} {
				b, cut := boundBody(raw, budget)
				var obj map[string]any
				if err := json.Unmarshal(b, &obj); err != nil {
					t.Fatalf("budget %d: not JSON: %v", budget, err)
				}
				if len(b) > budget || len(cut) == 0 || obj["id"] != "e1" || obj["type"] != "info" || obj["created"] != "2026-11-27T08:00:00Z" {
					t.Errorf("budget %d: %d bytes, cut %v, id %v type %v created %v", budget, len(b), cut, obj["id"], obj["type"], obj["created"])
				}
			}
		})
	}
}

// TestAnEventDatedInTheFutureHidesNothing: an event dated an hour ahead is published at once, and
// the events that come after it (which ordering by created lists before it) are published too,
// each once, across polls and a restart from the stream alone; it is never published again.
func TestAnEventDatedInTheFutureHidesNothing(t *testing.T) {
	r := newPoisonRig(t)
	want := r.j.good(5)
	r.j.add(fmt.Sprintf(`{"id":"future","type":"info","created":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))
	want = append(want, "future")
	ids := func(got []jetstream.RawStreamMsg) []string {
		var out []string
		for _, m := range got {
			out = append(out, m.Header.Get(nats.MsgIdHdr))
		}
		return out
	}
	exactlyOnceInOrder(t, "prod", want, ids(r.waitStored(t, len(want))))
	for range 3 { // each round in a poll of its own
		want = append(want, r.j.goodBeforeLast(3)...)
		exactlyOnceInOrder(t, "prod", want, ids(r.waitStored(t, len(want))))
	}
	// The stream holds the events before the forwarder has taken the stream's acks: its
	// backlog reaches 0 a moment after, and stays above 0 if the future event hid the rest.
	itest.Eventually(t, 10*time.Second, func() bool { return r.fw.Status().Backlog == 0 },
		"the backlog to reach 0: the future event is published")
	r.stops[0]()
	ev := r.fw.opts.Events
	ev.Checkpoint.Dir = t.TempDir()
	fw := r.start(t, r.fw.out.stream, r.fw.opts.Client, ev)
	more := r.j.goodBeforeLast(3)
	want = append(want, more...)
	exactlyOnceInOrder(t, "prod", want, ids(r.waitStored(t, len(want))))
	itest.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published >= 3 }, "the new forwarder's count")
	if n := fw.Status().Published; n != 3 {
		t.Errorf("the forwarder started from the stream published %d events, want the 3 new ones", n)
	}
}

// TestAControllerClockAheadThenOversizedEventsLoseNothing: forty events
// dated an hour ahead (more than the position once remembered by id), then events dated now,
// which ordering by created lists before them, one of them over max_payload: each goes out once.
// Before the position remembered any number of events dated ahead, the later ones counted as
// published and were never sent, with nothing said.
func TestAControllerClockAheadThenOversizedEventsLoseNothing(t *testing.T) {
	r := newPoisonRig(t)
	want := r.j.good(5)
	ids := func(got []jetstream.RawStreamMsg) []string {
		var out []string
		for _, m := range got {
			out = append(out, m.Header.Get(nats.MsgIdHdr))
		}
		return out
	}
	for i := range 40 {
		id := fmt.Sprintf("ahead-%02d", i)
		r.j.add(fmt.Sprintf(`{"id":%q,"type":"info","created":%q}`, id, time.Now().Add(time.Hour+time.Duration(i)*time.Millisecond).UTC().Format(time.RFC3339Nano)))
		want = append(want, id)
	}
	exactlyOnceInOrder(t, "prod", want, ids(r.waitStored(t, len(want))))
	// Written after: listed before the forty.
	below := func(raw string) {
		r.j.mu.Lock()
		ahead := append([]string(nil), r.j.events[len(r.j.events)-40:]...)
		r.j.events = r.j.events[:len(r.j.events)-40]
		r.j.mu.Unlock()
		r.j.add(raw)
		r.j.mu.Lock()
		r.j.events = append(r.j.events, ahead...)
		r.j.mu.Unlock()
	}
	below(`{"id":"now-1","type":"info","created":"CREATED"}`)
	below(`{"id":"huge","type":"error","created":"CREATED","detail_message":"` + strings.Repeat("x", 1536*1024) + `"}`)
	below(`{"id":"now-2","type":"info","created":"CREATED"}`)
	want = append(want, "now-1", "huge", "now-2")
	exactlyOnceInOrder(t, "prod", want, ids(r.waitStored(t, len(want))))
	if st := r.fw.Status(); st.Ahead != 40 || st.Rejected[rejectTooLarge] != 1 {
		t.Errorf("status: %d events remembered ahead of the clock (want 40), %d cut (want 1)", st.Ahead, st.Rejected[rejectTooLarge])
	}
	if !strings.Contains(r.logs.String(), "dated ahead of this machine's clock") {
		t.Errorf("the clock running ahead was not logged:\n%.2000s", r.logs.String())
	}
}
