package daemon

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// twoControllers is the configuration of TestReloadKeepsUnchangedControllers: alpha and beta
// collect, check guests and forward through an embedded NATS server.
type twoControllers struct {
	alphaURL, betaURL, tok, dir, listen string
	noBeta                              bool
	betaExtra                           string // more keys of beta's entry
	jetstreamExtra                      string // more keys of nats.jetstream
}

func (c twoControllers) yaml() string {
	ctrls := testutil.ControllerYAML("alpha", c.alphaURL, c.tok)
	if !c.noBeta {
		ctrls += testutil.ControllerYAML("beta", c.betaURL, c.tok) + c.betaExtra
	}
	return "controllers:\n" + ctrls +
		"collect:\n  interval: 1s\n" +
		"guest:\n  enabled: true\n  ping_interval: 1s\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: file, dir: %q}\n", c.dir) +
		fmt.Sprintf("nats:\n  jetstream: {stream: VEIL_EVENTS, create_stream: true%s}\n  embedded: {enabled: true, listen: %q, store_dir: %q}\n",
			c.jetstreamExtra, c.listen, filepath.Join(c.dir, "nats"))
}

// sumSeries adds the values of the series of family name that carry controller ctrl; ok is
// false when there is none.
func sumSeries(exposition, name, ctrl string) (sum float64, ok bool) {
	label := `controller="` + ctrl + `"`
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 || !strings.Contains(line[:end], label) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		sum, ok = sum+v, true
	}
	return sum, ok
}

// watcher scrapes /metrics and /-/ready as fast as it can and records, for the controllers it
// watches, a guest series lost or a counter gone down (first time of each), and every not-ready.
type watcher struct {
	base  string
	ctrls []string
	stop  chan struct{}
	done  sync.WaitGroup

	mu       sync.Mutex
	scrapes  int
	problems []string
	seen     map[string]bool // of problems, each reported once
	notReady int
}

func (w *watcher) problem(key, msg string) {
	if !w.seen[key] {
		w.seen[key] = true
		w.problems = append(w.problems, msg)
	}
}

// counters are the families that must never go down while a controller keeps running.
var keptCounters = []string{"veil_events_published_total", "veil_tasks_finished_total", "veil_api_requests_total"}

func watch(base string, ctrls []string) *watcher {
	w := &watcher{base: base, ctrls: ctrls, stop: make(chan struct{}), seen: map[string]bool{}}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		last := map[string]float64{}
		// Paced, not synchronised: a scrape every few milliseconds leaves CPU to the daemon.
		pace := time.NewTicker(2 * time.Millisecond)
		defer pace.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-pace.C:
			}
			code, _, err := fetch(w.base + "/-/ready")
			_, m, err2 := fetch(w.base + "/metrics")
			w.mu.Lock()
			if err != nil || err2 != nil {
				w.problem("scrape", fmt.Sprintf("scrape failed: %v %v", err, err2))
				w.mu.Unlock()
				continue
			}
			w.scrapes++
			if code != http.StatusOK {
				w.notReady++
			}
			for _, c := range w.ctrls {
				if _, ok := sumSeries(m, "veil_guest_ping_success", c); !ok {
					w.problem(c+" guest", c+": no veil_guest_ping_success series")
				}
				for _, name := range keptCounters {
					v, ok := sumSeries(m, name, c)
					key := c + " " + name
					if !ok || v < last[key] {
						w.problem(key, fmt.Sprintf("%s went from %g to %g (present %v)", key, last[key], v, ok))
					}
					last[key] = v
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scrapes
}

// finish stops the watcher and returns how many scrapes it made, what went wrong and how many
// /-/ready answers were not 200.
func (w *watcher) finish() (scrapes int, problems []string, notReady int) {
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scrapes, w.problems, w.notReady
}

func fetch(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestReloadKeepsUnchangedControllers: a reload leaves running, untouched, every controller whose
// settings did not change (its counters keep counting, its guest series never vanish, the
// daemon stays ready); a changed controller is rebuilt alone, a removed one disappears, a NATS
// change rebuilds every forwarder, and a refused reload touches nothing.
func TestReloadKeepsUnchangedControllers(t *testing.T) {
	for _, tt := range keepCases {
		t.Run(tt.name, func(t *testing.T) {
			r := newKeepRig(t)
			base := r.baseline(t)
			r.reload(t, tt)
			r.goesOn(t, tt, base)
		})
	}
}

// keepCase is one reload of TestReloadKeepsUnchangedControllers.
type keepCase struct {
	name   string
	change func(c twoControllers) string // the file reloaded
	// wantCode of POST /-/reload; kept never lose a series or see a counter go down, even
	// while the reload runs; rebuilt restart their event counters; gone have no series after.
	wantCode            int
	kept, rebuilt, gone []string
	readyThroughout     bool
	wantLog             string
}

var keepCases = []keepCase{
	{
		name:            "unchanged file keeps every controller running",
		change:          func(c twoControllers) string { return c.yaml() },
		wantCode:        200,
		kept:            []string{"alpha", "beta"},
		readyThroughout: true,
		wantLog:         `kept=alpha,beta started= stopped=`,
	},
	{
		name: "changed controller is rebuilt alone",
		change: func(c twoControllers) string {
			c.betaExtra = "    timeout: 7s\n"
			return c.yaml()
		},
		wantCode: 200,
		kept:     []string{"alpha"},
		rebuilt:  []string{"beta"},
		wantLog:  `kept=alpha started=beta stopped=beta`,
	},
	{
		name: "removed controller stops and its series vanish",
		change: func(c twoControllers) string {
			c.noBeta = true
			return c.yaml()
		},
		wantCode:        200,
		kept:            []string{"alpha"},
		gone:            []string{"beta"},
		readyThroughout: true,
		wantLog:         `kept=alpha started= stopped=beta`,
	},
	{
		name: "changed NATS rebuilds every forwarder",
		change: func(c twoControllers) string {
			c.jetstreamExtra = ", publish_timeout: 3s"
			return c.yaml()
		},
		wantCode: 200,
		rebuilt:  []string{"alpha", "beta"},
		wantLog:  `kept= started=alpha,beta stopped=alpha,beta`,
	},
	{
		name:            "refused reload keeps everything",
		change:          func(c twoControllers) string { return c.yaml() + "colour: red\n" },
		wantCode:        500,
		kept:            []string{"alpha", "beta"},
		readyThroughout: true,
		wantLog:         `configuration reload refused`,
	},
}

// keepRig is TestReloadKeepsUnchangedControllers' daemon: alpha and beta, each on a simulator,
// forwarding through an embedded NATS server.
type keepRig struct {
	d          *daemonUnderTest
	simA, simB *veiltest.Server
	cfg        twoControllers
	cfgFile    string
}

func newKeepRig(t *testing.T) *keepRig {
	dir := t.TempDir()
	opts := veiltest.Options{Token: testutil.SecretToken, VMs: 3, RunningFraction: 1, AgentFraction: 1, InitialEvents: 30, EventsOrder: "oldest_first"}
	opts.Seed = 5
	simA := veiltest.New(opts)
	t.Cleanup(simA.Close)
	opts.Seed = 6
	simB := veiltest.New(opts)
	t.Cleanup(simB.Close)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(testutil.SecretToken), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &keepRig{simA: simA, simB: simB, cfgFile: filepath.Join(dir, "veil.yaml"),
		cfg: twoControllers{alphaURL: simA.URL, betaURL: simB.URL, tok: tok, dir: dir, listen: freeAddr(t)}}
	if err := os.WriteFile(r.cfgFile, []byte(r.cfg.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	r.d = startDaemon(t, r.cfgFile)
	r.d.waitReady(t)
	return r
}

func (r *keepRig) published(t *testing.T, ctrl string) float64 {
	_, m := r.d.get(t, "/metrics")
	v, _ := sumSeries(m, "veil_events_published_total", ctrl)
	return v
}

// baseline finishes a task on each controller (so that veil_tasks_finished_total has a series)
// and returns what each published before the reload: the initial events and the task's.
func (r *keepRig) baseline(t *testing.T) map[string]float64 {
	for _, sim := range []*veiltest.Server{r.simA, r.simB} {
		finishTask(t, sim)
	}
	base := map[string]float64{}
	for c, sim := range map[string]*veiltest.Server{"alpha": r.simA, "beta": r.simB} {
		testutil.Eventually(t, 15*time.Second, func() bool {
			_, m := r.d.get(t, "/metrics")
			v, _ := sumSeries(m, "veil_events_published_total", c)
			_, pinged := sumSeries(m, "veil_guest_ping_success", c)
			_, counted := sumSeries(m, "veil_tasks_finished_total", c)
			base[c] = v
			return v == float64(sim.EventCount()) && pinged && counted
		}, "%s", c+"'s events published, guests pinged and a task counted")
	}
	return base
}

// reload writes tt's file and reloads it while scrapes watch the kept controllers.
func (r *keepRig) reload(t *testing.T, tt keepCase) {
	d := r.d
	if err := os.WriteFile(r.cfgFile, []byte(tt.change(r.cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	w := watch(d.base, tt.kept)
	testutil.Eventually(t, 15*time.Second, func() bool { return w.count() > 0 }, "a scrape before the reload")
	code, body := d.do(t, http.MethodPost, "/-/reload")
	after := w.count()
	// A rebuilt controller has a gap from the swap (which the reload's answer follows)
	// until its fresh inventory and guest checker have run: the watcher goes on until the
	// rebuilt ones are whole again, so a kept one rebuilt by mistake shows in its scrapes.
	testutil.Eventually(t, 15*time.Second, func() bool {
		_, m := d.get(t, "/metrics")
		for _, c := range tt.rebuilt {
			if _, ok := sumSeries(m, "veil_guest_ping_success", c); !ok {
				return false
			}
		}
		return w.count() >= after+3
	}, "the rebuilt controllers back and scrapes after the reload")
	_, problems, notReady := w.finish()
	if code != tt.wantCode {
		t.Fatalf("reload = %d %s, want %d", code, body, tt.wantCode)
	}
	for _, p := range problems {
		t.Errorf("kept controller interrupted: %s", p)
	}
	if tt.readyThroughout && notReady > 0 {
		t.Errorf("/-/ready failed %d times around the reload", notReady)
	}
	if !strings.Contains(d.logs.String(), tt.wantLog) {
		t.Errorf("logs lack %q:\n%s", tt.wantLog, d.logs.String())
	}
	d.waitReady(t)
}

// goesOn checks after the reload: a removed controller has no series, and every controller
// that runs goes on forwarding: a kept one adds to its count, a rebuilt one resumes from its
// checkpoint and counts only what is new.
func (r *keepRig) goesOn(t *testing.T, tt keepCase, base map[string]float64) {
	_, m := r.d.get(t, "/metrics")
	for _, c := range tt.gone {
		if strings.Contains(m, `controller="`+c+`"`) {
			t.Errorf("series of removed controller %s remain", c)
		}
	}
	for _, c := range tt.rebuilt {
		if v := r.published(t, c); v >= base[c] {
			t.Errorf("%s's veil_events_published_total = %g after the reload, want it restarted below %g", c, v, base[c])
		}
	}
	const more = 5
	r.simA.AddEvents(more, veiltest.EventSpec{Type: "info"})
	r.simB.AddEvents(more, veiltest.EventSpec{Type: "info"})
	for _, c := range tt.kept {
		testutil.Eventually(t, 15*time.Second, func() bool { return r.published(t, c) == base[c]+more }, "%s", c+" keeps counting")
	}
	for _, c := range tt.rebuilt {
		testutil.Eventually(t, 15*time.Second, func() bool { return r.published(t, c) == more }, "%s", c+" counts anew")
	}
	// A removed controller's earlier events stay in the stream; its new ones never come.
	want := int(base["alpha"]+base["beta"]) + more*(2-len(tt.gone))
	got := 0
	testutil.Eventually(t, 15*time.Second, func() bool { got = streamMsgs(r.cfg.listen, "VEIL_EVENTS"); return got == want }, "every event on NATS once")
}

// finishTask starts a short task on sim (a node's ballooning).
func finishTask(t *testing.T, sim *veiltest.Server) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, sim.URL+"/api/nodes/"+sim.NodeIDs()[0]+"/ballooning/", strings.NewReader(`{"ballooning": true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "jwt "+testutil.SecretToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("ballooning task: %s", resp.Status)
	}
}

// TestSettingsOf: what a reload compares to keep a controller counts only what shapes it.
func TestSettingsOf(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	write := func(content string) {
		if err := os.WriteFile(ca, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := func() *config.Config {
		c := config.Default()
		c.Controllers = []config.Controller{
			{Name: "alpha", URL: "https://a", TokenFile: "/t", TLS: config.TLS{CAFile: ca}},
			{Name: "beta", URL: "https://b", TokenFile: "/t"},
		}
		return &c
	}
	tests := []struct {
		name     string
		change   func(c *config.Config) // applied to a second configuration (and files) before comparing alpha
		wantSame bool
	}{
		{"identical configurations", func(*config.Config) {}, true},
		{"another controller's entry does not matter", func(c *config.Config) { c.Controllers[1].Timeout = time.Minute }, true},
		{"own entry matters", func(c *config.Config) { c.Controllers[0].MaxConcurrency = 3 }, false},
		{"collect matters", func(c *config.Config) { c.Collect.Interval = time.Minute }, false},
		{"guest settings matter while guest checks are on", func(c *config.Config) { c.Guest.PingInterval = time.Minute }, false},
		{"events settings matter while events are on", func(c *config.Config) { c.Events.PollInterval = time.Minute }, false},
		{"nats settings matter while events are on", func(c *config.Config) { c.NATS.SubjectPrefix = "other" }, false},
		{"a replaced ca_file matters", func(*config.Config) { write("other CA") }, false},
		{"an unreadable ca_file matters", func(*config.Config) { os.Remove(ca) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write("CA")
			a := base()
			before := settingsOf(a, a.Controllers[0])
			b := base()
			tt.change(b)
			if same := reflect.DeepEqual(before, settingsOf(b, b.Controllers[0])); same != tt.wantSame {
				t.Errorf("settings equal = %v, want %v", same, tt.wantSame)
			}
		})
	}

	// Sections that are off do not matter, whatever they say.
	off := func(guest, events bool) *config.Config {
		c := base()
		c.Guest.Enabled, c.Events.Enabled = guest, events
		return c
	}
	a, b := off(false, false), off(false, false)
	b.Guest.PingInterval, b.Events.PollInterval, b.NATS.URL = time.Minute, time.Minute, "nats://elsewhere:4222"
	if !reflect.DeepEqual(settingsOf(a, a.Controllers[0]), settingsOf(b, b.Controllers[0])) {
		t.Error("guest, events or nats settings count although guest checks and events are off")
	}
}
