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

func TestReplicasShareControllersAndHandOverOnStop(t *testing.T) {
	cluster := testutil.StartCluster(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	names := []string{"alpha", "bravo", "charlie", "delta"}
	sims := map[string]*veiltest.Server{}
	var ctrls strings.Builder
	for i, n := range names {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: testutil.SecretToken, VMs: 2, InitialEvents: 25, EventsOrder: "oldest_first"})
		t.Cleanup(sim.Close)
		sims[n] = sim
		ctrls.WriteString(testutil.ControllerYAML(n, sim.URL, tok))
	}
	stream := "VEIL_HA_TEST"
	start := func(instance string) *daemonUnderTest {
		f := filepath.Join(dir, instance+".yaml")
		cfg := "controllers:\n" + ctrls.String() +
			"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n", cluster.URLs(), stream) +
			fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: 3s\n  replicas: 3\n", instance)
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return startDaemon(t, f)
	}
	ds := map[string]*daemonUnderTest{"pod-a": start("pod-a"), "pod-b": start("pod-b"), "pod-c": start("pod-c")}

	// owners maps each controller to the replicas whose /metrics say they run it; a replica
	// exporting series of a controller it does not run fails the test.
	owners := func(live ...string) map[string][]string {
		out := map[string][]string{}
		for _, inst := range live {
			mine, foreign := leads(t, ds[inst])
			if len(foreign) > 0 {
				t.Errorf("%s exports series of %v, which it does not run", inst, foreign)
			}
			for _, ct := range mine {
				out[ct] = append(out[ct], inst)
			}
		}
		return out
	}
	oneEach := func(live ...string) bool {
		o := owners(live...)
		for _, n := range names {
			if len(o[n]) != 1 {
				return false
			}
		}
		return true
	}
	spread := func() bool {
		for _, d := range ds {
			if m, _ := leads(t, d); len(m) == 0 {
				return false
			}
		}
		return true
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return oneEach("pod-a", "pod-b", "pod-c") && spread() },
		"every controller run by exactly one replica, each replica running some; logs:\n%s", ds["pod-a"].logs)
	for inst, d := range ds {
		testutil.Eventually(t, 20*time.Second, func() bool { code, _ := d.get(t, "/-/ready"); return code == http.StatusOK },
			"%s ready", inst)
	}
	total := 0
	for _, sim := range sims {
		total += sim.EventCount()
	}
	urls := strings.Split(strings.ReplaceAll(cluster.URLs(), "nats://", ""), ",")
	testutil.Eventually(t, 30*time.Second, func() bool { return streamMsgs(urls[0], stream) == total },
		"%d events on the stream (has %d)", total, streamMsgs(urls[0], stream))

	// The status page says who runs what, the same on every replica.
	_, js := ds["pod-b"].get(t, "/?format=json")
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
	if st.Replicas == nil || st.Replicas.Instance != "pod-b" || len(st.Replicas.Controllers) != len(names) || len(st.Replicas.Instances) != 3 {
		t.Fatalf("status replicas section = %+v", st.Replicas)
	}
	o := owners("pod-a", "pod-b", "pod-c")
	for _, c := range st.Replicas.Controllers {
		if len(o[c.Controller]) != 1 || c.Owner != o[c.Controller][0] || c.Mine != (c.Owner == "pod-b") || c.Since.IsZero() {
			t.Errorf("status says %s is run by %q (mine %v), metrics say %v", c.Controller, c.Owner, c.Mine, o[c.Controller])
		}
	}

	// A reload may not change the ha section while replicas run: refused, the old one goes on.
	cfgA := filepath.Join(dir, "pod-a.yaml")
	body, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgA, []byte(strings.Replace(string(body), "lease_ttl: 3s", "lease_ttl: 4s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, msg := ds["pod-a"].do(t, http.MethodPost, "/-/reload"); code != http.StatusInternalServerError || !strings.Contains(msg, "the ha section changed") {
		t.Errorf("reload changing ha.lease_ttl = %d %q, want refused", code, msg)
	}
	if err := os.WriteFile(cfgA, body, 0o600); err != nil {
		t.Fatal(err)
	}

	// Stop the replica that runs the most (SIGTERM): the others take its controllers over at
	// once, well before its leases could expire, and forward what comes meanwhile exactly once.
	victim, gone := "", []string(nil)
	for _, inst := range []string{"pod-a", "pod-b", "pod-c"} {
		if m, _ := leads(t, ds[inst]); victim == "" || len(m) > len(gone) {
			victim, gone = inst, m
		}
	}
	rest := []string{}
	for inst := range ds {
		if inst != victim {
			rest = append(rest, inst)
		}
	}
	for _, sim := range sims {
		sim.AddEvents(10, veiltest.EventSpec{})
	}
	stopped := time.Now()
	ds[victim].stop()
	ds[victim].stop = func() {}
	testutil.Eventually(t, 15*time.Second, func() bool { return oneEach(rest...) }, "%v to move from %s to %v", gone, victim, rest)
	took := time.Since(stopped)
	t.Logf("%s stopped; %v moved to %v in %v (lease_ttl 3s)", victim, gone, rest, took)
	if !strings.Contains(ds[victim].logs.String(), `why="shutting down"`) {
		t.Errorf("%s did not release its leases on stop:\n%s", victim, ds[victim].logs)
	}
	for _, sim := range sims {
		sim.AddEvents(10, veiltest.EventSpec{})
	}
	total = 0
	for _, sim := range sims {
		total += sim.EventCount()
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return streamMsgs(urls[0], stream) == total },
		"%d events on the stream after the hand-over (has %d)", total, streamMsgs(urls[0], stream))
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
	if n := strings.Count(m, `controller="`+moved+`"`); n != 2 { // veil_ha_leader and its transitions
		t.Errorf("pod-a exports %d series of %s, released and stopping; want only veil_ha_leader and veil_ha_lease_transitions_total:\n%s",
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
