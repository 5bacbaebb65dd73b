package e2e

// This file holds the fault table's rig: the binaries it builds, one row's world (a simulator
// process, an embedded NATS server, the exporter), putting a fault on and taking it off, and
// the checks of what the exporter says, logs and forwards.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
)

type faultBinaries struct{ exporter, sim string }

func buildFaultBinaries(t *testing.T) faultBinaries {
	t.Helper()
	return faultBinaries{exporter: testutil.Build(t, "cmd/veil-exporter"), sim: testutil.Build(t, "cmd/veil-sim")}
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

func newFaultRig(t *testing.T, bins faultBinaries, row faultRow) *faultRig {
	t.Helper()
	r := newSimRig(t, bins, freeAddr(t))
	r.nats = testutil.StartNATS(t)
	natsURL := r.nats.URL()
	if row.target == natsServer && row.mode == slow {
		r.proxy = startSlowProxy(t, strings.TrimPrefix(natsURL, "nats://"))
		natsURL = "nats://" + r.proxy.addr()
	}
	r.connect(r.nats.URL())
	tokenFile := filepath.Join(r.dir, "token")
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

// newSimRig starts a row's simulator, listening on simAddr, and writes the token file; NATS
// and the exporter are the caller's.
func newSimRig(t *testing.T, bins faultBinaries, simAddr string) *faultRig {
	t.Helper()
	r := &faultRig{t: t, dir: t.TempDir(), token: "fault-token", bins: bins}
	r.sim = "http://" + simAddr
	start(t, r.dir, bins.sim, "--listen", simAddr, "--token", r.token, "--seed", "11",
		"--nodes", "2", "--vms", "6", "--initial-events", "20", "--event-rate", "0")
	testutil.WaitHTTP(t, r.sim+"/_sim/state", 20*time.Second)
	var err error
	if r.client, err = veil.New(veil.Config{URL: r.sim, Token: r.token}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "token"), []byte(r.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// connect connects the test's own client, which reads the stream, to NATS at url.
func (r *faultRig) connect(url string) {
	r.t.Helper()
	var err error
	r.nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(r.nc.Close)
	if r.js, err = jetstream.New(r.nc); err != nil {
		r.t.Fatal(err)
	}
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
