package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
)

// The fault table (issue 11, point 7): for each neighbour of the exporter — the controller's API
// and NATS — and each way it can fail — down at start, down during, flapping, slow — the real
// veil-exporter binary, run against the veil-sim binary and an embedded NATS server, must
//
//   - answer every /metrics scrape with 200 within a 10 s scrape timeout, and /-/healthy with
//     200 throughout (no neighbour's fault is mended by restarting the exporter);
//   - say the truth while the fault lasts: veil_up, veil_nats_connected and /-/ready (with its
//     reason) as the row expects;
//   - once the fault is gone, have every event of the simulator's journal on the JetStream
//     stream exactly once, in the journal's order;
//   - log each episode once when it starts and once when it ends, never once per retry.
//
// How the faults are made, and why:
//
//   - Controller down: the simulator's fault injection answers every /api/ request with a TCP
//     reset. Killing the simulator would lose its journal (it lives in memory), which a real
//     controller restarting does not: the events created while the API is unreachable must still
//     be there to be forwarded afterwards. A reset on every request is what the exporter sees of
//     a controller whose API host is gone; the control API (/_sim/) keeps working, so events are
//     still created "behind" the unreachable API.
//   - Controller slow: every /api/ answer is held 5 s (the simulator's latency). That is half
//     the request timeout (10 s, the default) but five times collect.interval (1 s here), and a
//     refresh never outlives its interval: every refresh fails, veil_up is 0 and one controller
//     episode is logged, while the event forwarder (bounded by the request timeout) goes on.
//   - NATS down: the embedded server is shut down and started again on the same port and store.
//   - NATS slow: the exporter reaches NATS through a proxy that holds every answer (server to
//     client bytes) 5 s. That equals the default JetStream timeouts (publish_timeout 5s, KV
//     operations 5s), so forwarding may fail while it lasts: at most one forwarding episode, and
//     never a NATS-down one (the connection stays up).
//   - Flapping: down about 2.5 s, up about 2.5 s, three times. An episode is an outage the
//     exporter saw: a flap may be merged with the next when the exporter did not reconnect in
//     between (NATS reconnects with backoff), so "once per episode" means the start and end lines
//     strictly alternate, beginning with a start and ending with an end, one pair per flap at
//     most and at least one pair in all.
func TestFaultTable(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	bins := buildFaultBinaries(t)
	for _, row := range faultRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			runFaultRow(t, bins, row)
		})
	}
}

type faultTarget int

const (
	controllerAPI faultTarget = iota
	natsServer
)

type faultMode int

const (
	downAtStart faultMode = iota
	downDuring
	flapping
	slow
)

// A logPair is the start and end lines of one kind of episode (messages of the exporter's log).
type logPair struct {
	name       string
	start, end []string // a line is a start (end) when it contains any of these
}

var (
	controllerEpisode = logPair{"controller",
		[]string{`msg="controller down: inventory refresh failed`},
		[]string{`msg="controller back up: inventory refresh succeeded"`}}
	natsEpisode = logPair{"NATS",
		[]string{`msg="NATS unreachable;`, `msg="NATS disconnected;`},
		[]string{`msg="NATS connected"`}}
	forwardingEpisode = logPair{"forwarding",
		[]string{`msg="event forwarding failed;`, `msg="event forwarding still failing;`},
		[]string{`msg="event forwarding recovered"`}}
)

// episodeWant bounds how many episodes of a pair the row may log after its mark. initialEnd
// allows one end line before any start: NATS connecting at the exporter's start.
type episodeWant struct {
	pair               logPair
	minPairs, maxPairs int
	initialEnd         bool
}

type faultRow struct {
	name   string
	target faultTarget
	mode   faultMode
	// during says what the exporter shows while the fault lasts: veil_up, veil_nats_connected
	// and /-/ready's status, with a word its body must hold.
	up, natsConnected float64
	readyCode         int
	readyWord         string
	episodes          []episodeWant
}

// flaps is how many outages a flapping row makes.
const flaps = 3

func faultRows() []faultRow {
	one := func(p logPair) episodeWant { return episodeWant{pair: p, minPairs: 1, maxPairs: 1} }
	none := func(p logPair) episodeWant { return episodeWant{pair: p} }
	atMostOne := func(p logPair) episodeWant { return episodeWant{pair: p, maxPairs: 1} }
	perFlap := func(p logPair, min int) episodeWant { return episodeWant{pair: p, minPairs: min, maxPairs: flaps} }
	natsAtStart := episodeWant{pair: natsEpisode, initialEnd: true}
	return []faultRow{
		// Ready once the first refresh has finished, failed or not: a controller that is down is
		// not a reason to take the exporter out of service (veil_up 0 says it, and must be
		// scraped to be seen); ready only waits for the first attempt.
		{name: "controller/down at start", target: controllerAPI, mode: downAtStart,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), one(forwardingEpisode), natsAtStart}},
		// Serving the last good data, with veil_up 0 saying it is old.
		{name: "controller/down during", target: controllerAPI, mode: downDuring,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), one(forwardingEpisode), none(natsEpisode)}},
		{name: "controller/flapping", target: controllerAPI, mode: flapping,
			up: -1, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{perFlap(controllerEpisode, 1), perFlap(forwardingEpisode, 1), none(natsEpisode)}},
		// A refresh never outlives collect.interval (collector.Inventory.Run): with answers
		// slower than the interval every refresh fails, so veil_up says 0 and the controller is
		// logged down once, although each request ends within its timeout. Events, bounded by
		// the request timeout only, keep flowing without an episode.
		{name: "controller/slow", target: controllerAPI, mode: slow,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), none(forwardingEpisode), none(natsEpisode)}},
		{name: "nats/down at start", target: natsServer, mode: downAtStart,
			up: 1, natsConnected: 0, readyCode: 503, readyWord: "NATS",
			episodes: []episodeWant{one(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
		{name: "nats/down during", target: natsServer, mode: downDuring,
			up: 1, natsConnected: 0, readyCode: 503, readyWord: "NATS",
			episodes: []episodeWant{one(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
		{name: "nats/flapping", target: natsServer, mode: flapping,
			up: 1, natsConnected: -1, readyCode: -1,
			episodes: []episodeWant{perFlap(natsEpisode, 1), perFlap(forwardingEpisode, 0), none(controllerEpisode)}},
		{name: "nats/slow", target: natsServer, mode: slow,
			up: 1, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{none(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
	}
}

type faultBinaries struct{ exporter, sim string }

func buildFaultBinaries(t *testing.T) faultBinaries {
	t.Helper()
	dir := t.TempDir()
	b := faultBinaries{exporter: filepath.Join(dir, "veil-exporter"), sim: filepath.Join(dir, "veil-sim")}
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/veil-exporter", "./cmd/veil-sim")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return b
}

// faultRig is one row's world: a simulator process, an embedded NATS server, the exporter.
type faultRig struct {
	t       *testing.T
	dir     string
	sim     string // base URL of the simulator
	token   string
	nats    *testutil.NATS
	proxy   *slowProxy // between the exporter and NATS (the NATS slow row only)
	web     string     // base URL of the exporter
	logPath string
	nc      *nats.Conn // the test's own connection, to read the stream
	js      jetstream.JetStream
	client  *veil.Client
	bins    faultBinaries
}

const (
	faultController = "faults"
	faultStream     = "VEIL_EVENTS"
	scrapeTimeout   = 10 * time.Second
	flapHalf        = 2500 * time.Millisecond // each flap: this long down, then this long up
	faultWindow     = 6 * time.Second         // how long a down or slow fault is held
	slowAnswer      = 5 * time.Second
)

func runFaultRow(t *testing.T, bins faultBinaries, row faultRow) {
	r := newFaultRig(t, bins, row)

	// Events flow the whole time the fault is on: two every 400 ms, created behind the API.
	feeder := r.feed()
	defer feeder.stop()

	var mark int // log offset where this row's episodes begin
	if row.mode == downAtStart {
		r.apply(row, true)
	}
	r.startExporter()
	scrapes := watchScrapes(r.web)
	defer scrapes.stop()

	var removed time.Time
	switch row.mode {
	case downAtStart:
		r.checkTruth(row, faultWindow)
		// Observation window: the fault stays a while so that events pile up behind it.
		time.Sleep(faultWindow / 2)
		r.checkTruth(row, 3*time.Second) // and still at the end
		r.apply(row, false)
		removed = time.Now()
	case downDuring, slow:
		r.settle()
		mark = r.logLen()
		r.apply(row, true)
		deadline := time.Now().Add(faultWindow)
		if row.mode == slow {
			// Long enough for several 5 s answers to be waited for.
			deadline = time.Now().Add(2*slowAnswer + time.Second)
		}
		r.checkTruth(row, time.Until(deadline))
		// Observation window: the rest of the fault, while scrapes and events go on.
		time.Sleep(time.Until(deadline))
		r.checkTruth(row, 3*time.Second) // and still at the end
		r.apply(row, false)
		removed = time.Now()
	case flapping:
		r.settle()
		mark = r.logLen()
		for range flaps {
			r.apply(row, true)
			// Observation windows: the flap's down half, then its up half.
			time.Sleep(flapHalf)
			r.apply(row, false)
			removed = time.Now()
			time.Sleep(flapHalf)
		}
	}
	feeder.stop()
	during, _ := r.streamLen() // events on the stream when the fault went (for the record)

	// After the fault: one more burst, then everything must be there, once and in order.
	r.addEvents(5)
	want := r.journal()
	var got []string
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		if err := r.healthyNow(); err != nil {
			return err
		}
		var err error
		got, err = r.streamIDs(len(want))
		return err
	}, "the exporter to recover and forward all %d events", len(want))
	recovered := time.Since(removed)
	checkExactlyOnceInOrder(t, want, got)

	r.checkEpisodes(row, mark)
	n, longest, problems := scrapes.finish()
	for _, p := range problems {
		t.Error(p)
	}
	if n == 0 {
		t.Error("no scrape was made")
	}
	t.Logf("FAULT-ROW %-26s events=%d on_stream_at_fault_end=%d scrapes=%d longest_scrape=%v recovered_in=%v",
		row.name, len(want), during, n, longest.Round(time.Millisecond), recovered.Round(time.Millisecond))
}

func newFaultRig(t *testing.T, bins faultBinaries, row faultRow) *faultRig {
	t.Helper()
	r := &faultRig{t: t, dir: t.TempDir(), token: "fault-token", bins: bins}
	r.nats = testutil.StartNATS(t)
	natsURL := r.nats.URL()
	if row.target == natsServer && row.mode == slow {
		r.proxy = startSlowProxy(t, strings.TrimPrefix(natsURL, "nats://"))
		natsURL = "nats://" + r.proxy.addr()
	}

	simAddr := freeAddr(t)
	r.sim = "http://" + simAddr
	start(t, r.dir, bins.sim, "--listen", simAddr, "--token", r.token, "--seed", "11",
		"--nodes", "2", "--vms", "6", "--initial-events", "20", "--event-rate", "0")
	waitHTTP(t, r.sim+"/_sim/state", 20*time.Second)
	var err error
	if r.client, err = veil.New(veil.Config{URL: r.sim, Token: r.token}); err != nil {
		t.Fatal(err)
	}

	r.nc, err = nats.Connect(r.nats.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	if r.js, err = jetstream.New(r.nc); err != nil {
		t.Fatal(err)
	}

	tokenFile := filepath.Join(r.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(r.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Defaults wherever the fault's outcome depends on them (controller timeout 10s, JetStream
	// timeouts 5s); short intervals so that the table runs in minutes. Guest checks are off:
	// they are not what this table is about, and they would share the request budget.
	cfg := fmt.Sprintf(`controllers:
  - name: %s
    url: %s
    token_file: %s
collect: {interval: 1s}
guest: {enabled: false}
events:
  poll_interval: 200ms
  start: earliest
  checkpoint: {store: nats_kv}
nats:
  url: %s
`, faultController, r.sim, tokenFile, natsURL)
	if err := os.WriteFile(filepath.Join(r.dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.web = "http://" + freeAddr(t)
	r.logPath = filepath.Join(r.dir, "veil-exporter.log")
	return r
}

func (r *faultRig) startExporter() {
	r.t.Helper()
	start(r.t, r.dir, r.bins.exporter,
		"--config.file", filepath.Join(r.dir, "config.yaml"),
		"--web.listen-address", strings.TrimPrefix(r.web, "http://"))
	testutil.EventuallyNil(r.t, 20*time.Second, func() error {
		_, _, err := httpGet(r.web + "/-/healthy")
		return err
	}, "the exporter to listen")
}

// apply puts the row's fault on (on) or takes it off.
func (r *faultRig) apply(row faultRow, on bool) {
	r.t.Helper()
	switch {
	case row.target == controllerAPI && row.mode == slow:
		lat := "0s"
		if on {
			lat = slowAnswer.String()
		}
		r.simPost("/_sim/latency", `{"fixed":"`+lat+`"}`)
	case row.target == controllerAPI:
		faults := `[]`
		if on {
			faults = `[{"kind":"reset"}]` // every /api/ path, every request
		}
		r.simPost("/_sim/faults", faults)
	case row.mode == slow:
		if on {
			r.proxy.setDelay(slowAnswer)
		} else {
			r.proxy.setDelay(0)
		}
	case on:
		r.nats.Stop()
	default:
		r.nats.Start()
	}
}

// settle waits until the exporter runs normally: ready, refreshed, forwarding.
func (r *faultRig) settle() {
	r.t.Helper()
	want := r.journal()
	testutil.EventuallyNil(r.t, 30*time.Second, func() error {
		if err := r.healthyNow(); err != nil {
			return err
		}
		n, err := r.streamLen()
		if err != nil {
			return err
		}
		if n < len(want) {
			return fmt.Errorf("%d of %d events on the stream", n, len(want))
		}
		return nil
	}, "the exporter to be ready and forwarding")
}

// healthyNow says what is still wrong with the exporter's normal state, nil when nothing is.
func (r *faultRig) healthyNow() error {
	code, body, err := httpGet(r.web + "/-/ready")
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("/-/ready %d: %s", code, body)
	}
	code, m, err := httpGet(r.web + "/metrics")
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("/metrics %d", code)
	}
	for _, name := range []string{"veil_up", "veil_nats_connected"} {
		if v, ok := metricValue(m, name); !ok || v != 1 {
			return fmt.Errorf("%s is %v (exported: %v)", name, v, ok)
		}
	}
	return nil
}

// checkTruth waits (within limit) until the exporter shows the fault as the row says it must.
func (r *faultRig) checkTruth(row faultRow, limit time.Duration) {
	r.t.Helper()
	testutil.EventuallyNil(r.t, limit, func() error {
		_, m, err := httpGet(r.web + "/metrics")
		if err != nil {
			return err
		}
		for _, c := range []struct {
			name string
			want float64
		}{{"veil_up", row.up}, {"veil_nats_connected", row.natsConnected}} {
			if c.want < 0 {
				continue
			}
			if v, ok := metricValue(m, c.name); !ok || v != c.want {
				return fmt.Errorf("%s is %v (exported: %v), want %v", c.name, v, ok, c.want)
			}
		}
		if row.readyCode < 0 {
			return nil
		}
		code, body, err := httpGet(r.web + "/-/ready")
		if err != nil {
			return err
		}
		if code != row.readyCode || !strings.Contains(string(body), row.readyWord) {
			return fmt.Errorf("/-/ready %d %q, want %d naming %q", code, body, row.readyCode, row.readyWord)
		}
		return nil
	}, "the exporter to show %s", row.name)
}

// checkEpisodes reads the exporter's log from mark and checks each pair's lines: they alternate
// start, end, ... (after at most one initial end when allowed), every episode has ended, and
// their number is within the row's bounds.
func (r *faultRig) checkEpisodes(row faultRow, mark int) {
	r.t.Helper()
	for _, w := range row.episodes {
		var seq []string // "start" or "end", in log order
		lines := func() []string {
			b, err := os.ReadFile(r.logPath)
			if err != nil {
				r.t.Fatal(err)
			}
			seq = seq[:0]
			var matched []string
			for _, l := range strings.Split(string(b[min(mark, len(b)):]), "\n") {
				switch {
				case containsAny(l, w.pair.start):
					seq, matched = append(seq, "start"), append(matched, l)
				case containsAny(l, w.pair.end):
					seq, matched = append(seq, "end"), append(matched, l)
				}
			}
			return matched
		}
		// The end line of the last episode may be written a moment after the stream is complete.
		testutil.Eventually(r.t, 10*time.Second, func() bool {
			lines()
			return len(seq) == 0 || seq[len(seq)-1] == "end"
		}, "the %s episode to be logged as ended", w.pair.name)
		matched := lines()
		s := seq
		if w.initialEnd {
			if len(s) == 0 || s[0] != "end" {
				r.t.Errorf("%s: want the initial connection logged once, got %v:\n%s", w.pair.name, s, strings.Join(matched, "\n"))
				continue
			}
			s = s[1:]
		}
		ok := len(s)%2 == 0
		for i := 0; ok && i < len(s); i++ {
			want := "start"
			if i%2 == 1 {
				want = "end"
			}
			ok = s[i] == want
		}
		pairs := len(s) / 2
		r.t.Logf("%s episode lines: %v", w.pair.name, seq)
		if !ok || pairs < w.minPairs || pairs > w.maxPairs {
			r.t.Errorf("%s episodes: want %d..%d, each logged once when it starts and once when it ends; got %v:\n%s",
				w.pair.name, w.minPairs, w.maxPairs, s, strings.Join(matched, "\n"))
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func (r *faultRig) logLen() int {
	st, err := os.Stat(r.logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	return int(st.Size())
}

func (r *faultRig) simPost(path, body string) []byte {
	r.t.Helper()
	resp, err := http.Post(r.sim+path, "application/json", strings.NewReader(body))
	if err != nil {
		r.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		r.t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
	}
	return b
}

func (r *faultRig) addEvents(n int) {
	r.t.Helper()
	r.simPost("/_sim/events", `{"n":`+strconv.Itoa(n)+`}`)
}

type feeder struct {
	once sync.Once
	quit chan struct{}
	done chan struct{}
}

// feed adds two events every 400 ms until stopped (through the control API, which no fault touches).
func (r *faultRig) feed() *feeder {
	f := &feeder{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.quit:
				return
			case <-tick.C:
				resp, err := http.Post(r.sim+"/_sim/events", "application/json", strings.NewReader(`{"n":2}`))
				if err == nil {
					resp.Body.Close()
				}
			}
		}
	}()
	return f
}

func (f *feeder) stop() {
	f.once.Do(func() { close(f.quit) })
	<-f.done
}

// journal lists the simulator's event ids oldest first, as the API orders them.
func (r *faultRig) journal() []string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for off := 0; ; off += 100 {
		p, err := r.client.EventsPage(ctx, off, 100, "created")
		if err != nil {
			r.t.Fatalf("reading the simulator's journal: %v", err)
		}
		for _, e := range p.Results {
			ids = append(ids, e.ID)
		}
		if len(p.Results) < 100 {
			return ids
		}
	}
}

func (r *faultRig) streamLen() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, faultStream)
	if err != nil {
		return 0, err
	}
	return int(s.CachedInfo().State.Msgs), nil
}

// streamIDs reads the event ids on the stream in stream order once it holds at least want
// messages (more are read too: a double must show).
func (r *faultRig) streamIDs(want int) ([]string, error) {
	n, err := r.streamLen()
	if err != nil {
		return nil, err
	}
	if n < want {
		return nil, fmt.Errorf("%d of %d events on the stream", n, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := r.js.OrderedConsumer(ctx, faultStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for len(ids) < n {
		batch, err := cons.Fetch(n-len(ids), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			id := m.Headers().Get("Nats-Msg-Id")
			ids = append(ids, strings.TrimPrefix(id, faultController+"."))
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func checkExactlyOnceInOrder(t *testing.T, want, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	var doubled, missing []string
	for id, n := range seen {
		if n > 1 {
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for _, id := range want {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(doubled) > 0 || len(missing) > 0 {
		t.Fatalf("%d events in the journal, %d on the stream: doubled %v, missing %v", len(want), len(got), doubled, missing)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events in the journal, %d on the stream", len(want), len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("out of order at %d: stream has %s, journal has %s", i, got[i], want[i])
		}
	}
}

// httpGet is one request with the scrape timeout; it never fails the test.
func httpGet(u string) (int, []byte, error) {
	c := http.Client{Timeout: scrapeTimeout}
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metricValue is the value of the first sample of the family name in an exposition.
func metricValue(exposition []byte, name string) (float64, bool) {
	for _, l := range bytes.Split(exposition, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte(name)) {
			continue
		}
		rest := l[len(name):]
		if len(rest) == 0 || rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		f := bytes.Fields(rest[bytes.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(f[0]), 64)
		return v, err == nil
	}
	return 0, false
}

// scrapeWatch scrapes /metrics and checks /-/healthy, as Prometheus and a liveness probe do,
// from the exporter's start to the row's end.
type scrapeWatch struct {
	mu       sync.Mutex
	n        int
	longest  time.Duration
	problems []string
	once     sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func watchScrapes(base string) *scrapeWatch {
	w := &scrapeWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			began := time.Now()
			code, _, err := httpGet(base + "/metrics")
			took := time.Since(began)
			hcode, hbody, herr := httpGet(base + "/-/healthy")
			w.mu.Lock()
			w.n++
			w.longest = max(w.longest, took)
			if err != nil || code != 200 || took > scrapeTimeout {
				w.problems = append(w.problems, fmt.Sprintf("scrape at %s: %d %v after %v", began.Format("15:04:05.000"), code, err, took))
			}
			if herr != nil || hcode != 200 {
				w.problems = append(w.problems, fmt.Sprintf("/-/healthy at %s: %d %v %s", began.Format("15:04:05.000"), hcode, herr, hbody))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *scrapeWatch) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}

func (w *scrapeWatch) finish() (n int, longest time.Duration, problems []string) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.longest, w.problems
}

// slowProxy forwards TCP connections to a NATS server and holds every answer (bytes from the
// server to the client) for a settable delay: a NATS server that is reachable but slow.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	quit   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startSlowProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target, quit: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) addr() string             { return p.ln.Addr().String() }
func (p *slowProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *slowProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // client → server, as it comes
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
			client.Close()
		}()
		go func() { // server → client, each chunk held until its time
			defer p.wg.Done()
			p.hold(server, client)
			server.Close()
			client.Close()
		}()
	}
}

type heldChunk struct {
	due  time.Time
	data []byte
}

func (p *slowProxy) hold(from, to net.Conn) {
	chunks := make(chan heldChunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				select {
				case chunks <- heldChunk{due: time.Now().Add(time.Duration(p.delay.Load())), data: buf[:n]}:
				case <-p.quit:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-p.quit:
				timer.Stop()
				return
			}
		}
		if _, err := to.Write(c.data); err != nil {
			return
		}
	}
}

func (p *slowProxy) close() {
	close(p.quit)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
