package guest

// The guest checker's test environment: a simulator, a real client, an inventory snapshot
// refreshed on demand and a running checker, with helpers to read its series and requests.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// guestEnv is a simulator, a real client, an inventory snapshot refreshed on demand (as the
// inventory collector would) and a running Checker.
type guestEnv struct {
	t      testing.TB
	sim    *veiltest.Server
	client *veil.Client
	gc     *Checker
	reg    *prometheus.Registry

	mu   sync.Mutex
	doms []veil.Domain
	gen  uint64 // grows with each refresh, as the inventory's does
}

type guestEnvOpts struct {
	sim         veiltest.Options
	cfg         config.Guest
	rate        float64 // client budget, requests per second (0: unlimited)
	concurrency int     // client limit (default 16)
	before      func(*guestEnv)
	// front, when set, puts a handler in front of the simulator (an agent offering less).
	front func(sim http.Handler) http.Handler
}

// guestTestConfig: intervals short enough for many sweeps in a test, and a command timeout no
// answer of the simulator on loopback reaches however loaded the machine (300 ms did, under the
// race detector beside a busy neighbour); a hung agent never answers, so it times out anyway.
func guestTestConfig() config.Guest {
	cfg := config.Default().Guest
	cfg.PingInterval = 200 * time.Millisecond
	cfg.OSInfoInterval = time.Minute
	cfg.FSInfoInterval = 200 * time.Millisecond
	cfg.TimeInterval = 200 * time.Millisecond
	cfg.NetworkInterval = 200 * time.Millisecond
	cfg.CommandTimeout = 2 * time.Second
	cfg.Concurrency = 4
	return cfg
}

// guestSimOptions: every VM running, with an agent, Linux, no templates, unless told otherwise.
func guestSimOptions(vms int) veiltest.Options {
	return veiltest.Options{VMs: vms, Seed: 7, Templates: -1, RunningFraction: 1, AgentFraction: 1,
		LinuxFraction: 1, InitialTasks: -1}
}

func newGuestEnv(t testing.TB, o guestEnvOpts) *guestEnv {
	t.Helper()
	sim := veiltest.New(o.sim)
	t.Cleanup(sim.Close)
	if o.concurrency == 0 {
		o.concurrency = 16
	}
	url := sim.URL
	if o.front != nil {
		target, _ := neturl.Parse(sim.URL)
		front := httptest.NewServer(o.front(httputil.NewSingleHostReverseProxy(target)))
		t.Cleanup(front.Close)
		url = front.URL
	}
	client, err := veil.New(veil.Config{URL: url, Token: sim.Token, MaxConcurrency: o.concurrency,
		MaxRequestsPerSecond: o.rate, RetryBaseDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	e := &guestEnv{t: t, sim: sim, client: client, reg: prometheus.NewRegistry()}
	if o.before != nil {
		o.before(e)
	}
	e.refresh()
	e.gc = NewChecker("sim", client, o.cfg, e, Outputs{Logger: log.NewNopLogger()})
	e.reg.MustRegister(e.gc)
	sim.ResetRequests()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.gc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of its context being canceled")
		}
	})
	return e
}

// refresh reads the inventory through the client, like the inventory collector does.
func (e *guestEnv) refresh() {
	e.t.Helper()
	doms, err := e.client.Domains(context.Background(), nil)
	if err != nil {
		e.t.Fatalf("reading domains: %v", err)
	}
	e.mu.Lock()
	e.doms = doms
	e.gen++
	e.mu.Unlock()
}

// DomainsGen makes the environment the checker's DomainSource, as the inventory is.
func (e *guestEnv) DomainsGen() ([]*veil.Domain, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	refs := make([]*veil.Domain, len(e.doms))
	for i := range e.doms {
		refs[i] = &e.doms[i]
	}
	return refs, e.gen
}

// eligibleIDs are the VMs the simulator says are running, not templates, with an active agent.
func (e *guestEnv) eligibleIDs() []string {
	var ids []string
	for _, id := range e.sim.DomainIDs() {
		if d, ok := e.sim.Domain(id); ok && d.PowerState == veil.PowerOn && !d.Template && d.AgentActive {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// series gathers the registry into "name{label="value",...}" -> value, labels sorted.
func (e *guestEnv) series() map[string]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// guestKey builds a series key the way series does; controller="sim" is added.
func guestKey(name string, labels ...string) string {
	ls := []string{`controller="sim"`}
	for i := 0; i+1 < len(labels); i += 2 {
		ls = append(ls, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

func (e *guestEnv) value(name string, labels ...string) (float64, bool) {
	v, ok := e.series()[guestKey(name, labels...)]
	return v, ok
}

// slack multiplies every wait of these tests: each names what a quiet machine needs, and make
// test runs them under the race detector beside every other package on two cores, where the
// checker's sweeps and renders (paced at a multiple of their own cost) take several times as
// long. A wait returns as soon as its condition holds, so only a failure waits longer.
const slack = 4

// eventually waits until cond holds, failing the test when slack times timeout passes first.
func (e *guestEnv) eventually(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	testutil.Eventually(e.t, slack*timeout, cond, "%s", what)
}

// runStatus is the checker's one run report, the guest collector's.
func (e *guestEnv) runStatus() runstatus.Status {
	e.t.Helper()
	sts := e.gc.RunStatus()
	if len(sts) != 1 {
		e.t.Fatalf("RunStatus = %+v, want one status", sts)
	}
	return sts[0]
}

// waitSweeps waits until n more full ping sweeps have ended.
func (e *guestEnv) waitSweeps(n int, timeout time.Duration) {
	e.t.Helper()
	// The sweep's lastEnd, not Status: at 10,000 VMs Status walks every VM under the checker's
	// lock, and polling it would slow the sweep being waited for.
	lastEnd := func() time.Time {
		e.gc.mu.Lock()
		defer e.gc.mu.Unlock()
		return e.gc.sweep.lastEnd()
	}
	last := lastEnd()
	for i := 0; i < n; i++ {
		e.eventually("a full ping sweep", timeout, func() bool {
			s := lastEnd()
			if s.After(last) {
				last = s
				return true
			}
			return false
		})
	}
}

// guestCmdsSent returns the qemu_cmd of every guest-command request in the log, per VM id.
func guestCmdsSent(t *testing.T, reqs []veiltest.Request) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range reqs {
		id, ok := guestRequestVM(r.Path, "guest-command")
		if !ok {
			continue
		}
		var body struct {
			Cmd string `json:"qemu_cmd"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("guest-command body %q: %v", r.Body, err)
		}
		out[id] = append(out[id], body.Cmd)
	}
	return out
}

// guestRequestVM extracts the VM id from /api/domains/{id}/<action>/.
func guestRequestVM(path, action string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/api/domains/")
	if !ok {
		return "", false
	}
	id, tail, ok := strings.Cut(rest, "/")
	if !ok || strings.Trim(tail, "/") != action {
		return "", false
	}
	return id, true
}

func countCmd(cmds []string, cmd string) int {
	n := 0
	for _, c := range cmds {
		if c == cmd {
			n++
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func guestCountAvailable(reqs []veiltest.Request, id string) int {
	n := 0
	for _, r := range reqs {
		if got, ok := guestRequestVM(r.Path, "available-guest-cmds"); ok && got == id {
			n++
		}
	}
	return n
}

// guestSeriesOf counts the veil_guest_* series that name the VM.
func (e *guestEnv) guestSeriesOf(id string) []string {
	var out []string
	for k := range e.series() {
		if strings.HasPrefix(k, "veil_guest_") && strings.Contains(k, `domain_id="`+id+`"`) {
			out = append(out, k)
		}
	}
	return out
}

// guestRequestsTo counts the guest-command and available-guest-cmds requests for one VM.
func guestRequestsTo(reqs []veiltest.Request, id string) int {
	n := 0
	for _, r := range reqs {
		for _, action := range []string{"guest-command", "available-guest-cmds"} {
			if got, ok := guestRequestVM(r.Path, action); ok && got == id {
				n++
			}
		}
	}
	return n
}

type stallWatch struct {
	mu     sync.Mutex
	stalls []stall
	stop   chan struct{}
	done   chan struct{}
}

type stall struct {
	end time.Time
	len time.Duration
}

func startStallWatch() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		const tick = time.Millisecond
		last := time.Now()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(tick):
			}
			now := time.Now()
			if late := now.Sub(last) - tick; late > tick {
				w.mu.Lock()
				w.stalls = append(w.stalls, stall{now, late})
				w.mu.Unlock()
			}
			last = now
		}
	}()
	return w
}

// Stop ends the watch.
func (w *stallWatch) Stop() {
	close(w.stop)
	<-w.done
}

// longest is the longest stall that ended within [from, to]: the most by which a request that
// arrived then can have been late.
func (w *stallWatch) longest(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		if !s.end.Before(from) && !s.end.After(to) {
			d = max(d, s.len)
		}
	}
	return d
}
