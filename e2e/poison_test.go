package e2e

// The poison suite (DESIGN §8): what a controller or a guest sends on a bad
// day, served by the simulator on request (/_sim/events/poison, /_sim/odd_fields,
// /_sim/domains/<id>/guest_hostile), with good events and good VMs around it. The contract of
// every row: one bad thing costs only itself, is counted, is said once, and never stops anything
// else. So each row checks, within one deadline, everything at once:
//   - every good event of the journal on the stream once and in order (the checker of the
//     durability suite, classify), the bad event in its documented form;
//   - every good VM exported on /metrics;
//   - the counter (veil_events_rejected_total{reason}, veil_objects_rejected_total{collection,reason});
//   - exactly one warn line of the exporter's log naming the bad object;
//   - NATS connected (veil_nats_connected 1), /-/healthy and /-/ready 200.
// A row that fails reports every facet still wrong at its deadline, not only the first.

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

const (
	poisonController = "poison"
	poisonPrefix     = "veil.events"
	// poisonMaxHeaders bounds the headers of any message: a few KiB whatever the number of
	// events at one instant.
	poisonMaxHeaders = 4 << 10
	// poisonMaxLabel bounds every label value on /metrics (label values capped in length).
	poisonMaxLabel = 1024
	// poisonTokenLen is what a subject token from controller data is cut to, before '-' and 8
	// hex characters of a hash.
	poisonTokenLen = 55
	// maxGuestFilesystems is the collector's bound of NICs and disks per guest, which
	// filesystems share: filesystems per VM are capped as NICs and disks are.
	maxGuestFilesystems = 64
)

type poisonRow struct {
	name     string
	guest    bool          // every VM a running Linux guest with an agent, guest checks on
	deadline time.Duration // for everything to hold
	run      func(w *poisonWorld)
}

func TestPoison(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	bins := buildFaultBinaries(t)
	for _, row := range poisonRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			w := newPoisonWorld(t, bins, row)
			row.run(w)
		})
	}
}

func poisonRows() []poisonRow {
	return []poisonRow{
		{name: "oversized event", deadline: 20 * time.Second, run: poisonOversized},
		{name: "long type", deadline: 20 * time.Second, run: poisonLongType},
		{name: "bad created", deadline: 20 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonBadCreated) }},
		{name: "missing created", deadline: 20 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonNoCreated) }},
		{name: "missing id", deadline: 20 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonNoID) }},
		{name: "future-dated event", deadline: 20 * time.Second, run: poisonFuture},
		{name: "thousands at one instant", deadline: 45 * time.Second, run: poisonSameInstant},
		{name: "odd field in a listing", deadline: 20 * time.Second, run: poisonOddField},
		{name: "hostile guest answers", guest: true, deadline: 25 * time.Second, run: poisonGuest},
	}
}

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

// ---- the rows ----

// poisonOversized: a detail_message of 1.5 MiB (max_payload is 1 MiB). The event goes out on
// its normal subject, the same JSON object with its largest fields cut to fit (a string ends in
// "…"), and headers Veil-Rejected: too_large, Veil-Original-Size: <bytes of the event>,
// Veil-Cut-Fields; the events after it go out too.
func poisonOversized(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": veiltest.PoisonHugeDetail, "size": veiltest.DefaultHugeDetail})
	w.goodEvents(5, false)
	facets := w.commonFacets(bad.ID)
	facets["the oversized event in its bounded form"] = func(msgs []streamMsg, _ []byte) error {
		m, err := onceOnStream(msgs, bad.ID)
		if err != nil {
			return err
		}
		var errs []string
		if want := poisonPrefix + "." + poisonController + ".info.domain"; m.subject != want {
			errs = append(errs, fmt.Sprintf("subject %q, want %q", m.subject, want))
		}
		if h := m.header.Get("Veil-Rejected"); h != "too_large" {
			errs = append(errs, fmt.Sprintf("Veil-Rejected %q, want too_large", h))
		}
		if h := m.header.Get("Veil-Cut-Fields"); !strings.Contains(h, "detail_message") {
			errs = append(errs, fmt.Sprintf("Veil-Cut-Fields %q, want detail_message among them", h))
		}
		if h := m.header.Get("Veil-Original-Size"); h != strconv.Itoa(bad.Size) {
			errs = append(errs, fmt.Sprintf("Veil-Original-Size %q, want %d (the event's JSON as the API sent it)", h, bad.Size))
		}
		var body struct {
			ID            string `json:"id"`
			Created       string `json:"created"`
			Type          string `json:"type"`
			DetailMessage string `json:"detail_message"`
		}
		if err := json.Unmarshal(m.data, &body); err != nil {
			errs = append(errs, fmt.Sprintf("body of %d bytes is not a JSON object: %v", len(m.data), err))
		} else if body.ID != bad.ID || body.Created != bad.Created || body.Type != bad.Type || !strings.HasSuffix(body.DetailMessage, "…") {
			errs = append(errs, fmt.Sprintf("body %s, want id %s, created %s, type %s, detail_message cut with …",
				cut(string(m.data), 300), bad.ID, bad.Created, bad.Type))
		}
		if len(m.data)+m.hdrBytes > 1<<20 {
			errs = append(errs, fmt.Sprintf("message of %d bytes, over max_payload", len(m.data)+m.hdrBytes))
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 1) }
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(bad.ID) }
	w.check(facets)
}

// poisonLongType: two events whose types are 5,000 characters, the same for their first
// thousands. Each goes out on a subject whose type token is the sanitized type cut to 64 bytes,
// '-' and 8 hex characters of a hash: bounded, and distinct for distinct types.
func poisonLongType(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	base := strings.Repeat("warning-from-a-very-chatty-plugin ", 150)[:4999]
	a := w.poison(map[string]any{"kind": veiltest.PoisonLongType, "type": base + "a"})
	w.goodEvents(3, false)
	b := w.poison(map[string]any{"kind": veiltest.PoisonLongType, "type": base + "b"})
	w.goodEvents(5, false)
	tokenRE := regexp.MustCompile(`^` + regexp.QuoteMeta(strings.ReplaceAll(base[:poisonTokenLen], " ", "_")) + `-[0-9a-f]{8}$`)
	facets := w.commonFacets(a.ID, b.ID)
	facets["long types on bounded, distinct subjects"] = func(msgs []streamMsg, _ []byte) error {
		var tokens []string
		for _, ev := range []veiltest.PoisonEventInfo{a, b} {
			m, err := onceOnStream(msgs, ev.ID)
			if err != nil {
				return err
			}
			prefix := poisonPrefix + "." + poisonController + "."
			rest, ok := strings.CutPrefix(m.subject, prefix)
			tok, class, _ := strings.Cut(rest, ".")
			if !ok || class != "domain" || !tokenRE.MatchString(tok) {
				return fmt.Errorf("event %s on subject %q (%d bytes), want %s<the type's first %d bytes, sanitized>-<8 hex>.domain",
					ev.ID, cut(m.subject, 200), len(m.subject), prefix, poisonTokenLen)
			}
			tokens = append(tokens, tok)
		}
		if tokens[0] == tokens[1] {
			return fmt.Errorf("two types that differ share the subject token %q", tokens[0])
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 2) }
	facets["said once each"] = func([]streamMsg, []byte) error {
		if err := w.saidOnce(a.ID); err != nil {
			return err
		}
		return w.saidOnce(b.ID)
	}
	w.check(facets)
}

// poisonUndecodable: an event with a bad created, none, or no id goes to the dead-letter
// subject <prefix>.<controller>.invalid with a Veil-Rejected header (the reason), its body naming it
// (its id, or its created when it has no id); the events after it go out.
func poisonUndecodable(w *poisonWorld, kind string) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": kind})
	w.goodEvents(5, false)
	names := bad.ID // what names it: its id, or without one its created
	if names == "" {
		names = bad.Created
	}
	facets := w.commonFacets()
	facets["the event on the dead-letter subject"] = func(msgs []streamMsg, _ []byte) error {
		want := poisonPrefix + "." + poisonController + ".invalid"
		var found []streamMsg
		for _, m := range msgs {
			if m.subject == want {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d messages on %s, want 1", len(found), want)
		}
		m := found[0]
		if m.header.Get("Veil-Rejected") == "" {
			return fmt.Errorf("the message on %s has no Veil-Rejected header: %v", want, m.header)
		}
		if !bytes.Contains(m.data, []byte(names)) {
			return fmt.Errorf("the message on %s does not name the event (%s): %s", want, names, cut(string(m.data), 300))
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 1) }
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(names) }
	w.check(facets)
}

// poisonFuture: an event dated an hour ahead (the controller's clock), then events dated now,
// which ordering by created lists before it. It never makes them count as published: every one
// goes out once, in the journal's order among themselves, and the future event once too.
func poisonFuture(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": veiltest.PoisonFuture, "offset": "1h"})
	// The events after it come once it is published, in later polls, each time before it.
	testutil.EventuallyNil(w.t, w.row.deadline, func() error {
		msgs, err := w.readStream()
		if err == nil && len(byID(msgs, bad.ID)) == 0 {
			err = fmt.Errorf("not yet")
		}
		return err
	}, "the future-dated event %s on the stream", bad.ID)
	// Each round waits (a little, without failing: the facets below say what is missing) for
	// the stream to hold the journal, so that the rounds come in separate polls.
	for range 3 {
		w.goodEvents(3, false)
		want := len(w.rawJournal())
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if n, err := w.streamLen(); err == nil && n >= want {
				break
			}
		}
	}
	facets := w.commonFacets()
	facets["the future event once"] = func(msgs []streamMsg, _ []byte) error {
		_, err := onceOnStream(msgs, bad.ID)
		return err
	}
	facets["no publish errors"] = func(_ []streamMsg, m []byte) error {
		if v, ok := metricValue(m, "veil_events_publish_errors_total"); ok && v != 0 {
			return fmt.Errorf("veil_events_publish_errors_total %v", v)
		}
		return nil
	}
	w.check(facets)
}

// poisonSameInstant: 3,000 events sharing one created instant. Every one goes out once and in
// order, no publish fails, and no message's headers grow past a few KiB.
func poisonSameInstant(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	w.goodEvents(3000, true)
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["headers bounded"] = func(msgs []streamMsg, _ []byte) error {
		worst, at := 0, ""
		for _, m := range msgs {
			if m.hdrBytes > worst {
				worst, at = m.hdrBytes, m.id
			}
		}
		if worst > poisonMaxHeaders {
			return fmt.Errorf("the headers of event %s take %d bytes, want at most %d", at, worst, poisonMaxHeaders)
		}
		return nil
	}
	facets["no publish errors"] = func(_ []streamMsg, m []byte) error {
		if v, ok := metricValue(m, "veil_events_publish_errors_total"); ok && v != 0 {
			return fmt.Errorf("veil_events_publish_errors_total %v", v)
		}
		return nil
	}
	w.check(facets)
}

// domainIDs lists the simulator's VM ids.
func (w *poisonWorld) domainIDs() []string {
	w.t.Helper()
	var ids struct {
		Domains []string `json:"domains"`
	}
	if err := json.Unmarshal(get(w.t, w.sim+"/_sim/ids"), &ids); err != nil {
		w.t.Fatal(err)
	}
	return ids.Domains
}

// everyVMExported: veil_domain_info of every VM in ids.
func everyVMExported(m []byte, ids []string) error {
	have := map[string]bool{}
	for _, s := range samples(m, "veil_domain_info") {
		have[s.labels["domain_id"]] = true
	}
	var missing []string
	for _, id := range ids {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d good VMs not exported (veil_domain_info): %v", len(missing), len(ids), first(missing))
	}
	return nil
}

// poisonOddField: one VM's memory_count is "n/a" (as a platform upgrade can bring) from
// before the exporter starts (the restart case). Every other VM is exported, the controller is
// up, the odd VM is counted in veil_objects_rejected_total{collection="domains",reason} and said
// once with the field.
func poisonOddField(w *poisonWorld) {
	ids := w.domainIDs()
	odd := ids[len(ids)/2]
	good := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == odd })
	w.simPost("/_sim/odd_fields", fmt.Sprintf(`[{"collection":"domains","id":%q,"field":"memory_count","value":"n/a"}]`, odd))
	w.startExporter()
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["every good VM exported"] = func(_ []streamMsg, m []byte) error { return everyVMExported(m, good) }
	facets["counted"] = func(_ []streamMsg, m []byte) error {
		n, seen := rejected(m, "veil_objects_rejected_total", []string{"collection", "reason"},
			func(l map[string]string) bool { return l["collection"] == "domains" })
		if n < 1 {
			return fmt.Errorf(`veil_objects_rejected_total{collection="domains",reason} is %v (%v), want at least 1`, n, seen)
		}
		return nil
	}
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(odd, "memory_count") }
	w.check(facets)
}

// poisonGuest: hostile guest agents. VM a answers guest-get-fsinfo with 5,000 filesystems, VM b
// guest-get-osinfo with strings of 100,000 characters, VM c guest-get-fsinfo with wrong types
// in its first filesystem (the others good). Every VM is exported with its good guest data; a's
// filesystems are capped as NICs and disks are; no label value is longer than poisonMaxLabel;
// c's bad filesystem is counted and said once, its good ones exported.
func poisonGuest(w *poisonWorld) {
	ids := w.domainIDs()
	a, b, c := ids[0], ids[1], ids[2]
	w.simPost("/_sim/domains/"+a+"/guest_hostile", `{"command":"guest-get-fsinfo","kind":"many","n":5000}`)
	w.simPost("/_sim/domains/"+b+"/guest_hostile", `{"command":"guest-get-osinfo","kind":"long_strings","size":100000}`)
	w.simPost("/_sim/domains/"+c+"/guest_hostile", `{"command":"guest-get-fsinfo","kind":"wrong_types"}`)
	w.startExporter()
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["every VM exported"] = func(_ []streamMsg, m []byte) error { return everyVMExported(m, ids) }
	facets["good guests' data exported"] = func(_ []streamMsg, m []byte) error {
		fs, osi := map[string]int{}, map[string]bool{}
		for _, s := range samples(m, "veil_guest_filesystem_size_bytes") {
			fs[s.labels["domain_id"]]++
		}
		for _, s := range samples(m, "veil_guest_os_info") {
			osi[s.labels["domain_id"]] = true
		}
		var errs []string
		for _, id := range ids {
			if id != a && id != c && fs[id] == 0 {
				errs = append(errs, "no filesystem of "+id)
			}
			if !osi[id] {
				errs = append(errs, "no veil_guest_os_info of "+id)
			}
		}
		if fs[a] < 1 || fs[a] > maxGuestFilesystems {
			errs = append(errs, fmt.Sprintf("%d filesystems of %s (it reports 5,000), want 1 to %d", fs[a], a, maxGuestFilesystems))
		}
		var boot bool
		for _, s := range samples(m, "veil_guest_filesystem_size_bytes") {
			boot = boot || s.labels["domain_id"] == c && s.labels["mountpoint"] == "/boot/efi"
		}
		if !boot {
			errs = append(errs, "the good /boot/efi filesystem of "+c+" (its / is the bad one) is not exported")
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	facets["label values bounded"] = func(_ []streamMsg, m []byte) error {
		for _, l := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			for _, lv := range labelRE.FindAllStringSubmatch(l, -1) {
				if len(lv[2]) > poisonMaxLabel {
					return fmt.Errorf("label %s of %s is %d bytes, want at most %d", lv[1], cut(l, 60), len(lv[2]), poisonMaxLabel)
				}
			}
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error {
		n, seen := rejected(m, "veil_objects_rejected_total", []string{"collection", "reason"},
			func(l map[string]string) bool {
				return strings.Contains(l["collection"], "fsinfo") || strings.Contains(l["collection"], "guest")
			})
		if n < 1 {
			return fmt.Errorf("veil_objects_rejected_total{collection=<guest fsinfo>,reason} is %v (%v), want at least 1", n, seen)
		}
		return nil
	}
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(c, "fsinfo") }
	w.check(facets)
}
