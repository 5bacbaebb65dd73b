package e2e

// The poison suite's world (a simulator process, an embedded NATS server and the exporter) and
// the checker's reads of the stream, /metrics and the log.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// poisonWorld is one row's world: a simulator process, an embedded NATS server, the exporter
// (logging JSON lines), and the test's own NATS connection.
type poisonWorld struct {
	*faultRig
	row poisonRow
	bad map[string]bool // journal keys of the row's bad events: not in the good journal
}

func newPoisonWorld(t *testing.T, bins faultBinaries, row poisonRow) *poisonWorld {
	t.Helper()
	r := &faultRig{t: t, dir: t.TempDir(), token: "poison-token", bins: bins}
	simAddr := freeAddr(t)
	r.sim = "http://" + simAddr
	args := []string{"--listen", simAddr, "--token", r.token, "--seed", "11", "--nodes", "2", "--vms", "6",
		"--initial-events", "20", "--event-rate", "0"}
	if row.guest {
		args = append(args, "--templates", "-1", "--running-fraction", "1", "--agent-fraction", "1", "--linux-fraction", "1")
	}
	start(t, r.dir, bins.sim, args...)
	testutil.WaitHTTP(t, r.sim+"/_sim/state", 20*time.Second)
	r.nats = testutil.StartNATS(t)
	r.connect(r.nats.URL())
	tokenFile := filepath.Join(r.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(r.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guest := "{enabled: false}"
	if row.guest {
		guest = "{ping_interval: 1s, osinfo_interval: 1s, fsinfo_interval: 1s, time_interval: 1s, network_interval: 1s, stats_interval: 1s, command_timeout: 2s}"
	}
	cfg := fmt.Sprintf(`controllers:
  - name: %s
    url: %s
    token_file: %s
collect: {interval: 1s}
guest: %s
events:
  poll_interval: 100ms
  start: earliest
  checkpoint: {store: nats_kv}
nats:
  url: %s
  subject_prefix: %s
`, poisonController, r.sim, tokenFile, guest, r.nats.URL(), poisonPrefix)
	if err := os.WriteFile(filepath.Join(r.dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.web = "http://" + freeAddr(t)
	r.logPath = filepath.Join(r.dir, "veil-exporter.log")
	return &poisonWorld{faultRig: r, row: row, bad: map[string]bool{}}
}

// startExporter starts the exporter (JSON log lines, level info: warn lines are what is
// checked) and waits until it listens and has forwarded the initial journal.
func (w *poisonWorld) startExporter() {
	w.t.Helper()
	start(w.t, w.dir, w.bins.exporter,
		"--config.file", filepath.Join(w.dir, "config.yaml"),
		"--web.listen-address", strings.TrimPrefix(w.web, "http://"),
		"--log.format", "json", "--log.level", "info")
	testutil.EventuallyNil(w.t, 20*time.Second, func() error {
		_, _, err := httpGet(w.web + "/-/healthy")
		return err
	}, "the exporter to listen")
}

// settle waits until the initial journal is on the stream (before any bad event).
func (w *poisonWorld) settle() {
	w.t.Helper()
	want := len(w.rawJournal())
	testutil.EventuallyNil(w.t, 20*time.Second, func() error {
		n, err := w.streamLen()
		if err == nil && n < want {
			err = fmt.Errorf("%d of %d events on the stream", n, want)
		}
		return err
	}, "the initial journal on the stream")
}

func (w *poisonWorld) poison(p map[string]any) veiltest.PoisonEventInfo {
	w.t.Helper()
	b, _ := json.Marshal(p)
	var info veiltest.PoisonEventInfo
	if err := json.Unmarshal(w.simPost("/_sim/events/poison", string(b)), &info); err != nil {
		w.t.Fatal(err)
	}
	w.bad[info.Key] = true
	return info
}

func (w *poisonWorld) goodEvents(n int, sameCreated bool) {
	w.t.Helper()
	w.simPost("/_sim/events", fmt.Sprintf(`{"n":%d,"same_created":%v,"type":"info"}`, n, sameCreated))
}

// journalEvent is one event of the simulator's journal as the API lists it.
type journalEvent struct {
	ID      string // "" when the event has none
	Created string // as sent; "" when absent
	Size    int    // bytes of its JSON
}

// rawJournal reads the simulator's journal oldest first over plain HTTP: the product's client
// must not decide what the checker sees.
func (w *poisonWorld) rawJournal() []journalEvent {
	w.t.Helper()
	var out []journalEvent
	for off := 0; ; off += 100 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/events/?ordering=created&limit=100&offset=%d", w.sim, off), nil)
		req.Header.Set("Authorization", "jwt "+w.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.t.Fatalf("reading the journal: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			w.t.Fatalf("reading the journal: %v %d", err, resp.StatusCode)
		}
		var page struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			w.t.Fatalf("reading the journal: %v", err)
		}
		for _, raw := range page.Results {
			var e struct {
				ID      *string          `json:"id"`
				Created *json.RawMessage `json:"created"`
			}
			_ = json.Unmarshal(raw, &e)
			je := journalEvent{Size: len(raw)}
			if e.ID != nil {
				je.ID = *e.ID
			}
			if e.Created != nil {
				_ = json.Unmarshal(*e.Created, &je.Created)
			}
			out = append(out, je)
		}
		if len(page.Results) < 100 {
			return out
		}
	}
}

// streamMsg is one message of the stream as the checker needs it.
type streamMsg struct {
	subject  string
	id       string // Nats-Msg-Id without "<controller>."
	header   nats.Header
	hdrBytes int // the headers' size on the wire, about
	data     []byte
}

// readStream reads every message the stream holds, in stream order.
func (w *poisonWorld) readStream() ([]streamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, faultStream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	n := int(info.State.Msgs)
	if n == 0 {
		return nil, nil
	}
	cons, err := w.js.OrderedConsumer(ctx, faultStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []streamMsg
	for len(out) < n {
		batch, err := cons.Fetch(min(n-len(out), 500), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		before := len(out)
		for m := range batch.Messages() {
			sm := streamMsg{subject: m.Subject(), header: m.Headers(), data: m.Data()}
			sm.id = strings.TrimPrefix(sm.header.Get(nats.MsgIdHdr), poisonController+".")
			for k, vs := range sm.header {
				for _, v := range vs {
					sm.hdrBytes += len(k) + len(v) + 4
				}
			}
			out = append(out, sm)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if len(out) == before {
			return nil, fmt.Errorf("read %d of %d messages, then nothing", len(out), n)
		}
	}
	return out, nil
}

// ---- the facets every row checks ----

// goodEventsOnce: every good event of the journal on the stream once and in order (extra:
// bad ids the row wants in that order too, at their place in the journal).
func (w *poisonWorld) goodEventsOnce(msgs []streamMsg, inOrder ...string) error {
	var journal []string
	for _, e := range w.rawJournal() {
		if e.ID != "" && (!w.bad[e.ID] || slices.Contains(inOrder, e.ID)) {
			journal = append(journal, e.ID)
		}
	}
	known := map[string]bool{}
	for _, id := range journal {
		known[id] = true
	}
	var stream []string
	for _, m := range msgs {
		if known[m.id] {
			stream = append(stream, m.id)
		}
	}
	v := classify(journal, stream)
	if !v.clean() {
		return fmt.Errorf("%d of %d good events on the stream once and in order: lost %d %v, duplicated %d %v, out of order %d %v",
			v.ok, v.checked, len(v.lost), first(v.lost), len(v.duplicated), first(v.duplicated), len(v.outOfOrder), first(v.outOfOrder))
	}
	return nil
}

// exporterHealthy: NATS connected, the controller up, /-/healthy and /-/ready 200.
func (w *poisonWorld) exporterHealthy(m []byte) error {
	var errs []string
	for _, name := range []string{"veil_nats_connected", "veil_up"} {
		if v, ok := metricValue(m, name); !ok || v != 1 {
			errs = append(errs, fmt.Sprintf("%s is %v (exported: %v), want 1", name, v, ok))
		}
	}
	for _, p := range []string{"/-/healthy", "/-/ready"} {
		code, body, err := httpGet(w.web + p)
		if err != nil || code != 200 {
			errs = append(errs, fmt.Sprintf("%s answers %d %q (%v), want 200", p, code, bytes.TrimSpace(body), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// sample is one sample of a family on /metrics.
type sample struct {
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// samples returns the samples of the family name (exactly that name) in a text exposition.
func samples(exposition []byte, name string) []sample {
	var out []sample
	for _, l := range strings.Split(string(exposition), "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		s := sample{labels: map[string]string{}}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			for _, m := range labelRE.FindAllStringSubmatch(rest[1:end], -1) {
				s.labels[m[1]], _ = strconv.Unquote(`"` + m[2] + `"`)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		s.value, _ = strconv.ParseFloat(f[0], 64)
		out = append(out, s)
	}
	return out
}

// rejected is the sum of the family's samples whose labels have non-empty values for every
// name in need and that keep (if not nil) accepts, with the samples seen.
func rejected(m []byte, family string, need []string, keep func(map[string]string) bool) (float64, []map[string]string) {
	var sum float64
	var seen []map[string]string
	for _, s := range samples(m, family) {
		ok := true
		for _, n := range need {
			ok = ok && s.labels[n] != ""
		}
		if ok && (keep == nil || keep(s.labels)) {
			sum += s.value
			seen = append(seen, s.labels)
		}
	}
	return sum, seen
}

// eventsRejected: veil_events_rejected_total{reason} sums to want.
func eventsRejected(m []byte, want float64) error {
	if got, seen := rejected(m, "veil_events_rejected_total", []string{"reason"}, nil); got != want {
		return fmt.Errorf("veil_events_rejected_total{reason} sums to %v (%v), want %v", got, seen, want)
	}
	return nil
}

// warnLines are the exporter's warn lines (JSON log) that contain every one of words.
func (w *poisonWorld) warnLines(words ...string) []string {
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil || rec["level"] != "warn" {
			continue
		}
		all := true
		for _, x := range words {
			all = all && strings.Contains(l, x)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// saidOnce: exactly one warn line names the bad object (it contains every one of words).
func (w *poisonWorld) saidOnce(words ...string) error {
	lines := w.warnLines(words...)
	if len(lines) != 1 {
		for i := range lines {
			lines[i] = cut(lines[i], 300)
		}
		return fmt.Errorf("%d warn lines contain %q, want exactly one: %v", len(lines), words, lines)
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// check evaluates the row's facets (named) until all hold or the row's deadline passes, then
// reports each one still failing. Nothing sleeps but the poll.
func (w *poisonWorld) check(facets map[string]func(msgs []streamMsg, m []byte) error) {
	w.t.Helper()
	names := make([]string, 0, len(facets))
	for n := range facets {
		names = append(names, n)
	}
	slices.Sort(names)
	deadline := time.Now().Add(w.row.deadline)
	var failing map[string]error
	for {
		failing = map[string]error{}
		msgs, err := w.readStream()
		if err != nil {
			failing["reading the stream"] = err
		}
		code, m, err := httpGet(w.web + "/metrics")
		if err != nil || code != 200 {
			failing["scraping /metrics"] = fmt.Errorf("%d %v", code, err)
		}
		for _, n := range names {
			if err := facets[n](msgs, m); err != nil {
				failing[n] = err
			}
		}
		if len(failing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	keys := make([]string, 0, len(failing))
	for n := range failing {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	for _, n := range keys {
		w.t.Errorf("%s, after %v: %v", n, w.row.deadline, failing[n])
	}
}

// commonFacets are the facets of every event row: the good events once and in order (with the
// bad ids in inOrder at their place), the exporter healthy.
func (w *poisonWorld) commonFacets(inOrder ...string) map[string]func([]streamMsg, []byte) error {
	return map[string]func([]streamMsg, []byte) error{
		"every good event once, in order": func(msgs []streamMsg, _ []byte) error { return w.goodEventsOnce(msgs, inOrder...) },
		"NATS connected, healthy, ready":  func(_ []streamMsg, m []byte) error { return w.exporterHealthy(m) },
	}
}

// byID is the messages whose Nats-Msg-Id names event id.
func byID(msgs []streamMsg, id string) []streamMsg {
	var out []streamMsg
	for _, m := range msgs {
		if m.id == id {
			out = append(out, m)
		}
	}
	return out
}

// onceOnStream is the one message of event id on the stream.
func onceOnStream(msgs []streamMsg, id string) (streamMsg, error) {
	got := byID(msgs, id)
	if len(got) != 1 {
		subjects := make([]string, len(got))
		for i, m := range got {
			subjects[i] = cut(m.subject, 100)
		}
		return streamMsg{}, fmt.Errorf("event %s is on the stream %d times (%v), want once", id, len(got), subjects)
	}
	return got[0], nil
}
