// Tests of replicas (ha.enabled) through whole daemons: three of them on a three-node NATS
// cluster share four controllers, each run by exactly one, and a stopped one hands its
// controllers over at once without an event lost or doubled.

package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

var leaderRE = regexp.MustCompile(`(?m)^veil_ha_leader\{controller="([^"]+)"\} ([01])$`)

// leads returns the controllers a daemon's /metrics says it runs (veil_ha_leader 1) and
// whether it exported any other series of a controller it does not run.
func leads(t *testing.T, d *daemonUnderTest) (mine []string, foreign []string) {
	t.Helper()
	code, m := d.get(t, "/metrics")
	if code != http.StatusOK {
		return nil, nil
	}
	run := map[string]bool{}
	for _, g := range leaderRE.FindAllStringSubmatch(m, -1) {
		if g[2] == "1" {
			run[g[1]] = true
			mine = append(mine, g[1])
		}
	}
	for _, g := range regexp.MustCompile(`(?m)^veil_up\{controller="([^"]+)"\}`).FindAllStringSubmatch(m, -1) {
		if !run[g[1]] {
			foreign = append(foreign, g[1])
		}
	}
	sort.Strings(mine)
	return mine, foreign
}

// TestReplicasShareControllersAndHandOverOnStop: three replicas run every controller exactly
// once between them and forward every event once; the status page says who runs what; a reload
// of the ha section is refused; a stopped replica's controllers move at once.
func TestReplicasShareControllersAndHandOverOnStop(t *testing.T) {
	r := newReplicaRig(t)
	all := []string{"pod-a", "pod-b", "pod-c"}
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(t, all...) && r.spread(t) },
		"every controller run by exactly one replica, each replica running some; logs:\n%s", r.ds["pod-a"].logs)
	for inst, d := range r.ds {
		testutil.Eventually(t, 20*time.Second, func() bool { code, _ := d.get(t, "/-/ready"); return code == http.StatusOK },
			"%s ready", inst)
	}
	r.allForwarded(t, "")
	r.statusSaysWhoRuns(t)
	r.haReloadRefused(t)
	r.handOverOnStop(t)
	r.allForwarded(t, " after the hand-over")
}

// replicaRig is three replicas (pod-a, pod-b, pod-c) sharing four controllers over a NATS
// cluster, forwarding to one stream.
type replicaRig struct {
	dir   string
	names []string
	sims  map[string]*veiltest.Server
	ds    map[string]*daemonUnderTest
	url   string // of one of the cluster's servers
}

const replicaStream = "VEIL_HA_TEST"

func newReplicaRig(t *testing.T) *replicaRig {
	cluster := testutil.StartCluster(t)
	r := &replicaRig{dir: t.TempDir(), names: []string{"alpha", "bravo", "charlie", "delta"}, sims: map[string]*veiltest.Server{}}
	r.url = strings.Split(strings.ReplaceAll(cluster.URLs(), "nats://", ""), ",")[0]
	tok := filepath.Join(r.dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	var ctrls strings.Builder
	for i, n := range r.names {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: testutil.SecretToken, VMs: 2, InitialEvents: 25, EventsOrder: "oldest_first"})
		t.Cleanup(sim.Close)
		r.sims[n] = sim
		ctrls.WriteString(testutil.ControllerYAML(n, sim.URL, tok))
	}
	start := func(instance string) *daemonUnderTest {
		f := filepath.Join(r.dir, instance+".yaml")
		cfg := "controllers:\n" + ctrls.String() +
			"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n", cluster.URLs(), replicaStream) +
			fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: 3s\n  replicas: 3\n", instance)
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return startDaemon(t, f)
	}
	r.ds = map[string]*daemonUnderTest{"pod-a": start("pod-a"), "pod-b": start("pod-b"), "pod-c": start("pod-c")}
	return r
}

// owners maps each controller to the replicas of live whose /metrics say they run it; a replica
// exporting series of a controller it does not run fails the test.
func (r *replicaRig) owners(t *testing.T, live ...string) map[string][]string {
	out := map[string][]string{}
	for _, inst := range live {
		mine, foreign := leads(t, r.ds[inst])
		if len(foreign) > 0 {
			t.Errorf("%s exports series of %v, which it does not run", inst, foreign)
		}
		for _, ct := range mine {
			out[ct] = append(out[ct], inst)
		}
	}
	return out
}

// oneEach says whether every controller is run by exactly one replica of live.
func (r *replicaRig) oneEach(t *testing.T, live ...string) bool {
	o := r.owners(t, live...)
	for _, n := range r.names {
		if len(o[n]) != 1 {
			return false
		}
	}
	return true
}

// spread says whether every replica runs some controller.
func (r *replicaRig) spread(t *testing.T) bool {
	for _, d := range r.ds {
		if m, _ := leads(t, d); len(m) == 0 {
			return false
		}
	}
	return true
}

// allForwarded waits until the stream holds every event of every simulator, once.
func (r *replicaRig) allForwarded(t *testing.T, when string) {
	total := 0
	for _, sim := range r.sims {
		total += sim.EventCount()
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return streamMsgs(r.url, replicaStream) == total },
		"%d events on the stream%s (has %d)", total, when, streamMsgs(r.url, replicaStream))
}

// statusSaysWhoRuns: the status page says who runs what, as the metrics do.
func (r *replicaRig) statusSaysWhoRuns(t *testing.T) {
	_, js := r.ds["pod-b"].get(t, "/?format=json")
	var st struct {
		Replicas *struct {
			Instance    string   `json:"instance"`
			Instances   []string `json:"instances"`
			Controllers []struct {
				Controller string    `json:"controller"`
				Owner      string    `json:"owner"`
				Since      time.Time `json:"since"`
				Mine       bool      `json:"mine"`
			} `json:"controllers"`
		} `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	if st.Replicas == nil || st.Replicas.Instance != "pod-b" || len(st.Replicas.Controllers) != len(r.names) || len(st.Replicas.Instances) != 3 {
		t.Fatalf("status replicas section = %+v", st.Replicas)
	}
	o := r.owners(t, "pod-a", "pod-b", "pod-c")
	for _, c := range st.Replicas.Controllers {
		if len(o[c.Controller]) != 1 || c.Owner != o[c.Controller][0] || c.Mine != (c.Owner == "pod-b") || c.Since.IsZero() {
			t.Errorf("status says %s is run by %q (mine %v), metrics say %v", c.Controller, c.Owner, c.Mine, o[c.Controller])
		}
	}
}

// haReloadRefused: a reload may not change the ha section while replicas run: refused, the old
// one goes on.
func (r *replicaRig) haReloadRefused(t *testing.T) {
	cfgA := filepath.Join(r.dir, "pod-a.yaml")
	body, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgA, []byte(strings.Replace(string(body), "lease_ttl: 3s", "lease_ttl: 4s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, msg := r.ds["pod-a"].do(t, http.MethodPost, "/-/reload"); code != http.StatusInternalServerError || !strings.Contains(msg, "the ha section changed") {
		t.Errorf("reload changing ha.lease_ttl = %d %q, want refused", code, msg)
	}
	if err := os.WriteFile(cfgA, body, 0o600); err != nil {
		t.Fatal(err)
	}
}

// handOverOnStop stops the replica that runs the most (SIGTERM): the others take its
// controllers over at once, well before its leases could expire; events come meanwhile.
func (r *replicaRig) handOverOnStop(t *testing.T) {
	victim, gone := "", []string(nil)
	for _, inst := range []string{"pod-a", "pod-b", "pod-c"} {
		if m, _ := leads(t, r.ds[inst]); victim == "" || len(m) > len(gone) {
			victim, gone = inst, m
		}
	}
	rest := []string{}
	for inst := range r.ds {
		if inst != victim {
			rest = append(rest, inst)
		}
	}
	for _, sim := range r.sims {
		sim.AddEvents(10, veiltest.EventSpec{})
	}
	stopped := time.Now()
	r.ds[victim].stop()
	r.ds[victim].stop = func() {}
	testutil.Eventually(t, 15*time.Second, func() bool { return r.oneEach(t, rest...) }, "%v to move from %s to %v", gone, victim, rest)
	t.Logf("%s stopped; %v moved to %v in %v (lease_ttl 3s)", victim, gone, rest, time.Since(stopped))
	if !strings.Contains(r.ds[victim].logs.String(), `why="shutting down"`) {
		t.Errorf("%s did not release its leases on stop:\n%s", victim, r.ds[victim].logs)
	}
	for _, sim := range r.sims {
		sim.AddEvents(10, veiltest.EventSpec{})
	}
}

// TestReleasedControllerExportsNothing: pod-a runs both controllers; pod-b joins and one is
// handed over to it. While pod-a's released controller is still stopping (held here), pod-a's
// /metrics says veil_ha_leader 0 for it and exports none of its series.
func TestReleasedControllerExportsNothing(t *testing.T) {
	ns := testutil.StartNATS(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	var ctrls strings.Builder
	for i, n := range []string{"alpha", "bravo"} {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: testutil.SecretToken, VMs: 1, InitialEvents: 5})
		t.Cleanup(sim.Close)
		ctrls.WriteString(testutil.ControllerYAML(n, sim.URL, tok))
	}
	config := func(instance string) string {
		f := filepath.Join(dir, instance+".yaml")
		cfg := "controllers:\n" + ctrls.String() + "collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n", ns.URL()) +
			fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: 3s\n", instance)
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	stopping := make(chan string, 1)
	gate := make(chan struct{})
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	a := startDaemon(t, config("pod-a"), func(d *Daemon) {
		d.beforeStop = func(name string) {
			select {
			case stopping <- name:
			default:
			}
			<-gate
		}
	})
	testutil.Eventually(t, 20*time.Second, func() bool {
		mine, foreign := leads(t, a)
		return strings.Join(mine, ",") == "alpha,bravo" && len(foreign) == 0 && strings.Count(metricsOf(t, a), "veil_up{") == 2
	}, "pod-a runs and exports both; logs:\n%s", a.logs)

	startDaemon(t, config("pod-b"))
	var moved string
	select {
	case moved = <-stopping:
	case <-time.After(30 * time.Second):
		t.Fatalf("pod-a released nothing when pod-b joined; logs:\n%s", a.logs)
	}
	m := metricsOf(t, a)
	if !strings.Contains(m, `veil_ha_leader{controller="`+moved+`"} 0`) {
		t.Errorf("pod-a's veil_ha_leader for %s while it stops is not 0", moved)
	}
	if n := strings.Count(m, `controller="`+moved+`"`); n != 3 { // veil_ha_leader, its transitions and expirations
		t.Errorf("pod-a exports %d series of %s, released and stopping; want only veil_ha_leader, veil_ha_lease_transitions_total and veil_ha_lease_expirations_total:\n%s",
			n, moved, grepLines(m, `controller="`+moved+`"`))
	}
	opened = true
	close(gate)
	testutil.Eventually(t, 20*time.Second, func() bool {
		mine, foreign := leads(t, a)
		return len(mine) == 1 && mine[0] != moved && len(foreign) == 0
	}, "pod-a runs only the one it kept")
}

func metricsOf(t *testing.T, d *daemonUnderTest) string {
	t.Helper()
	code, m := d.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return m
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
