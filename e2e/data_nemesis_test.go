package e2e

// The data nemesis: what the infrastructure nemesis (nemesis_test.go) is for faults, this is for
// what a controller sends. A seeded random schedule of every kind of hostile event the poison
// suite tries one at a time (an oversized detail, an over-long type, a created that is bad, null
// or missing, no id, a created hours ahead), bursts sharing one instant, and the controller's
// clock running ahead for a run of ordinary events then back (or staying there: the events after
// are dated as the newest of them, ties in the future), interleaved with kill -9 of the
// exporter and a restart of NATS, while a feeder keeps writing ordinary events. It is judged
// event by event against the journal: every event on the stream exactly once (an event without
// an id by its body), the events the controller dated right in the journal's order, nothing
// backlogged or held back at the end.
//
// VEIL_DATA_NEMESIS_STEPS (make test: 30) sets the schedule's length; make faults runs 300.
// VEIL_DATA_NEMESIS_SEED replays one schedule (a failing run logs it).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// dataStep is one step of the schedule: what it does, as the log and a replay show it.
type dataStep struct {
	kind string // poison kinds of the simulator, "ahead", "late", "instant", "kill", "nats", "wait"
	n    int    // events of an ahead run or a burst
	off  time.Duration
}

func (s dataStep) String() string {
	switch s.kind {
	case "ahead":
		return fmt.Sprintf("%d events %s ahead", s.n, s.off)
	case "ahead_stays":
		return fmt.Sprintf("%d events %s ahead, the events after dated no earlier", s.n, s.off)
	case "future":
		return fmt.Sprintf("poison future %s", s.off)
	case "instant":
		return fmt.Sprintf("%d events at one instant", s.n)
	case "late":
		return fmt.Sprintf("%d events listed late, dated %s back", s.n, s.off)
	}
	return s.kind
}

// dataSchedule draws steps from seed.
func dataSchedule(seed uint64, steps int) []dataStep {
	rng := rand.New(rand.NewPCG(seed, 0xda7a))
	poison := []string{"huge_detail", "long_type", "bad_created", "null_created", "no_created", "no_id"}
	out := make([]dataStep, 0, steps)
	for range steps {
		var s dataStep
		switch r := rng.IntN(100); {
		case r < 30:
			s = dataStep{kind: poison[rng.IntN(len(poison))]}
		case r < 40:
			s = dataStep{kind: "ahead", n: 1 + rng.IntN(60), off: time.Duration(2+rng.IntN(180)) * time.Minute}
		case r < 45:
			s = dataStep{kind: "ahead_stays", n: 1 + rng.IntN(60), off: time.Duration(2+rng.IntN(30)) * time.Minute}
		case r < 55:
			s = dataStep{kind: "future", off: time.Duration(1+rng.IntN(180)) * time.Minute}
		case r < 62:
			s = dataStep{kind: "instant", n: 20 + rng.IntN(300)}
		case r < 67:
			// A transaction committed late, a clock stepped back: within the forwarder's settle
			// time (5 s), less the second the Date header is truncated to.
			s = dataStep{kind: "late", n: 1 + rng.IntN(10), off: time.Duration(rng.IntN(3900)) * time.Millisecond}
		case r < 72:
			s = dataStep{kind: "kill"}
		case r < 77:
			s = dataStep{kind: "nats"}
		default:
			s = dataStep{kind: "wait"}
		}
		out = append(out, s)
	}
	return out
}

func dataNemesisSeed(t *testing.T) uint64 {
	if s := os.Getenv("VEIL_DATA_NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VEIL_DATA_NEMESIS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func dataNemesisSteps(t *testing.T) int {
	if s := os.Getenv("VEIL_DATA_NEMESIS_STEPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("VEIL_DATA_NEMESIS_STEPS=%q: want a positive integer", s)
		}
		return v
	}
	return 30
}

func TestDataNemesis(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	seed, steps := dataNemesisSeed(t), dataNemesisSteps(t)
	plan := dataSchedule(seed, steps)
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			for i, s := range plan {
				fmt.Fprintf(&b, "\n  %3d %s", i, s)
			}
			t.Logf("data nemesis seed %d (replay: VEIL_DATA_NEMESIS_SEED=%d VEIL_DATA_NEMESIS_STEPS=%d), schedule:%s", seed, seed, steps, b.String())
		}
	})
	w := newDurabilityWorld(t, buildFaultBinaries(t), false, false, 1)
	p := w.exporter("exporter", exporterOpts{})
	p.start()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	kills, restarts := 0, 0
	late := map[string]bool{} // listed after newer events: published after them
	for _, s := range plan {
		switch s.kind {
		case "ahead":
			w.simPost("/_sim/events", fmt.Sprintf(`{"n":%d,"ahead":%q}`, s.n, s.off))
		case "ahead_stays":
			w.simPost("/_sim/events", fmt.Sprintf(`{"n":%d,"ahead":%q,"ahead_stays":true}`, s.n, s.off))
		case "instant":
			w.simPost("/_sim/events", fmt.Sprintf(`{"n":%d,"same_created":true}`, s.n))
		case "late":
			var added struct{ IDs []string }
			if err := json.Unmarshal(w.simPost("/_sim/events", fmt.Sprintf(`{"n":%d,"late":%q}`, s.n, s.off)), &added); err != nil {
				t.Fatal(err)
			}
			for _, id := range added.IDs {
				late[id] = true
			}
		case "future":
			w.simPost("/_sim/events/poison", fmt.Sprintf(`{"kind":"future","offset":%q}`, s.off))
		case "kill":
			// Most often in the middle of publishing what the steps before wrote.
			p.signal(syscall.SIGKILL)
			p.wait()
			p.start()
			kills++
		case "nats":
			w.nats.Stop()
			w.nats.Start()
			restarts++
		case "wait":
			w.grows(w.count(), "the stream")
		default:
			w.simPost("/_sim/events/poison", fmt.Sprintf(`{"kind":%q}`, s.kind))
		}
		if rng.IntN(3) == 0 {
			w.addEvents(1 + rng.IntN(20)) // ordinary events between hostile ones
		}
	}
	w.feeder.stop()
	t.Logf("data nemesis seed %d: %d steps, %d kills, %d NATS restarts, %d events listed late", seed, steps, kills, restarts, len(late))
	judgeData(t, w, p, late)
}

// rawEvent is one event of the journal as the API serves it, oldest first.
type rawEvent struct {
	id     string // "" when it has none
	raw    []byte
	dated  bool // its created is a time no later than when it was read: the controller's clock was right
	hasKey bool
}

// rawEvents reads the simulator's journal over plain HTTP (the product's client must not decide
// what the checker sees).
func rawEvents(t *testing.T, w *durabilityWorld) []rawEvent {
	t.Helper()
	now := time.Now()
	var out []rawEvent
	for off := 0; ; off += 100 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/events/?ordering=created&limit=100&offset=%d", w.sim, off), nil)
		req.Header.Set("Authorization", "jwt "+w.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("reading the journal: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("reading the journal: %v %d", err, resp.StatusCode)
		}
		var page struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("reading the journal: %v", err)
		}
		for _, raw := range page.Results {
			var e struct {
				ID      *string `json:"id"`
				Created *string `json:"created"`
			}
			_ = json.Unmarshal(raw, &e)
			re := rawEvent{raw: raw}
			if e.ID != nil {
				re.id, re.hasKey = *e.ID, true
			}
			if e.Created != nil {
				c, err := time.Parse(time.RFC3339Nano, *e.Created)
				re.dated = err == nil && !c.After(now)
			}
			out = append(out, re)
		}
		if len(page.Results) < 100 {
			return out
		}
	}
}

// dataMsg is one message of the stream: its event id (Nats-Msg-Id without the controller) and,
// for an event without an id, its body.
type dataMsg struct {
	id   string
	data []byte
	hdr  nats.Header // kept to say where a duplicate came from
}

// readDataStream reads the whole stream in order.
func readDataStream(t *testing.T, js jetstream.JetStream) []dataMsg {
	t.Helper()
	var out []dataMsg
	for _, m := range readStreamMsgs(t, js, faultStream) {
		id := strings.TrimPrefix(m.Headers().Get(nats.MsgIdHdr), faultController+".")
		dm := dataMsg{id: id, hdr: m.Headers()}
		if strings.HasPrefix(id, "invalid-") {
			dm.data = m.Data()
		}
		out = append(out, dm)
	}
	return out
}

// judgeData waits until the stream holds as many messages as the journal has events, then
// judges every event: once on the stream, the rightly dated ones in the journal's order, and the
// exporter with nothing backlogged or held back.
func judgeData(t *testing.T, w *durabilityWorld, p *replicaProc, late map[string]bool) {
	t.Helper()
	journal := rawEvents(t, w)
	for i := range journal {
		if late[journal[i].id] {
			journal[i].dated = false // in the journal's order only once it was listed
		}
	}
	// Waits for as many messages as the journal has events (or 90 s), then judges what is there:
	// a lost event is named, not only counted.
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		if n, err := w.streamLen(); err == nil && n >= len(journal) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the stream's length
	}
	msgs := readDataStream(t, w.js)
	v := tallyData(t, journal, msgs)
	order := classify(v.inOrder, v.streamOrder(msgs))
	t.Logf("data nemesis: %d journal events (%d without an id byte-identical to another), %d messages; %d lost, %d duplicated; of %d rightly dated, %d out of order",
		len(journal), v.twins, len(msgs), len(v.lost), len(v.dup), len(v.inOrder), len(order.outOfOrder))
	if want := len(journal) - v.twins; len(msgs) != want {
		t.Errorf("%d messages on the stream, want %d", len(msgs), want)
	}
	if len(v.lost) > 0 || len(v.dup) > 0 || len(order.outOfOrder) > 0 {
		t.Errorf("lost %v, duplicated %v, out of order %v", first(v.lost), first(v.dup), first(order.outOfOrder))
	}
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		_, m, err := httpGet("http://" + p.web + "/metrics")
		if err != nil {
			return err
		}
		for _, name := range []string{"veil_events_backlog", "veil_events_held_back"} {
			if v, ok := metricValue(m, name); !ok || v != 0 {
				return fmt.Errorf("%s is %v (exported: %v), want 0", name, v, ok)
			}
		}
		return nil
	}, "nothing backlogged or held back")
}

// dataTally is the journal judged against the stream, event by event.
type dataTally struct {
	lost, dup []string
	inOrder   []string // the ids of the rightly dated events, in the journal's order
	twins     int      // events without an id byte-identical to an earlier one
}

// streamOrder is the ids of the rightly dated events in stream order.
func (v dataTally) streamOrder(msgs []dataMsg) []string {
	known := map[string]bool{}
	for _, id := range v.inOrder {
		known[id] = true
	}
	var out []string
	for _, m := range msgs {
		if known[m.id] {
			out = append(out, m.id)
		}
	}
	return out
}

// tallyData judges each journal event: with an id, by how often the stream holds it (a
// duplicate's messages are logged); without one, by its body, which must be on the stream once.
func tallyData(t *testing.T, journal []rawEvent, msgs []dataMsg) dataTally {
	times := map[string]int{}
	var bodies [][]byte
	for _, m := range msgs {
		if m.data != nil {
			bodies = append(bodies, m.data)
		}
		times[m.id]++
	}
	var v dataTally
	judged := map[string]bool{} // bodies of events without an id
	for _, e := range journal {
		if !e.hasKey {
			// Events without an id are told apart by their bodies: byte-identical ones (a
			// controller's clock held at one instant, the same VM and message) are one event to
			// a subscriber and to the forwarder, published once (docs/events.md).
			if judged[string(e.raw)] {
				v.twins++
				continue
			}
			judged[string(e.raw)] = true
			if n := countBody(bodies, e.raw); n != 1 {
				t.Errorf("the event without an id %s is on the stream %d times, want once", cut(string(e.raw), 200), n)
			}
			continue
		}
		switch times[e.id] {
		case 0:
			v.lost = append(v.lost, e.id)
			t.Logf("lost: %s", cut(string(e.raw), 300))
		case 1:
		default:
			v.dup = append(v.dup, e.id)
			logDuplicate(t, e, msgs)
		}
		if e.dated {
			v.inOrder = append(v.inOrder, e.id)
		}
	}
	return v
}

func countBody(bodies [][]byte, raw []byte) int {
	n := 0
	for _, b := range bodies {
		if bytes.Equal(b, raw) {
			n++
		}
	}
	return n
}

// logDuplicate logs each message of a duplicated event with the position its headers carry.
func logDuplicate(t *testing.T, e rawEvent, msgs []dataMsg) {
	for i, m := range msgs {
		if m.id == e.id {
			t.Logf("duplicated %s: message %d of %d, Veil-Created %s, ids %s, Veil-Future-Count %s, Veil-Rejected %s; journal: %s", e.id, i+1, len(msgs),
				m.hdr.Get("Veil-Created"), m.hdr.Get("Veil-Created-Ids"), m.hdr.Get("Veil-Future-Count"), m.hdr.Get("Veil-Rejected"), cut(string(e.raw), 200))
		}
	}
}
