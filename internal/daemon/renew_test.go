// Tests that the coordinator's callbacks never wait for a reload: a lease is renewed on time
// while a reload stops a controller that is slow to stop.

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestReloadDoesNotDelayRenewals: a reload stops beta, which takes longer than a lease time to
// stop; meanwhile gamma's lease is taken away, so the coordinator releases and acquires it again
// during the reload. Its callbacks do not wait for the reload: alpha's lease is renewed
// throughout (never invalid, never taken again), and gamma runs again while beta's stop is still
// held up (the stop lasts until then, however long this machine takes).
func TestReloadDoesNotDelayRenewals(t *testing.T) {
	const ttl = 3 * time.Second // the shortest config accepts: renewed every second
	ns := testutil.StartNATS(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	entries := map[string]string{}
	for i, n := range []string{"alpha", "beta", "gamma"} {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: testutil.SecretToken, VMs: 1})
		t.Cleanup(sim.Close)
		entries[n] = testutil.ControllerYAML(n, sim.URL, tok)
	}
	cfgFile := filepath.Join(dir, "veil.yaml")
	write := func(betaExtra string) {
		testutil.WriteConfig(t, cfgFile, entries["alpha"], entries["beta"]+betaExtra, entries["gamma"])
		f, err := os.OpenFile(cfgFile, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString("ha: {enabled: true, lease_ttl: 3s, instance: pod-a}\nnats: {url: " + ns.URL() + "}\n")
	}
	write("")

	stopping, gammaSeen := make(chan struct{}, 1), make(chan struct{})
	var slow atomic.Bool // only the reload's stop of beta is slow; a release or shutdown's are not
	d := startDaemon(t, cfgFile, func(d *Daemon) {
		d.beforeStop = func(name string) {
			if name == "beta" && slow.CompareAndSwap(false, true) {
				stopping <- struct{}{}
				time.Sleep(ttl + time.Second)
				select { // a minute: callbacks that waited for the reload never bring gamma back
				case <-gammaSeen:
				case <-time.After(time.Minute):
				}
			}
		}
	})
	coord := d.d.Coordinator()
	testutil.Eventually(t, 20*time.Second, func() bool {
		mine, _ := leads(t, d)
		return strings.Join(mine, ",") == "alpha,beta,gamma"
	}, "all three run here; logs:\n%s", d.logs)
	alpha := coord.Lease("alpha")

	write("    timeout: 7s\n") // beta's settings change: the reload stops it
	reloaded := make(chan error, 1)
	go func() { reloaded <- d.d.Reload() }()
	<-stopping
	kv := leaseBucket(t, ns.URL())
	if err := kv.Delete(context.Background(), "leases.gamma"); err != nil {
		t.Fatal(err)
	}
	gammaBack := false
	for {
		select {
		case err := <-reloaded:
			if err != nil {
				t.Fatalf("reload: %v", err)
			}
			if !gammaBack {
				t.Errorf("gamma was not acquired again while the reload stopped beta; logs:\n%s", d.logs)
			}
			if l := coord.Lease("alpha"); l != alpha {
				t.Errorf("alpha's lease was taken again during the reload; logs:\n%s", d.logs)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		// Invalid means no renewal for a whole ttl: the reload (stopping beta for longer than
		// that) held the coordinator up. A renewal merely late under load is not that.
		if l := coord.Lease("alpha"); l != alpha || !l.Valid() {
			t.Fatalf("alpha's lease not renewed during the reload (lease %p, was %p); logs:\n%s", l, alpha, d.logs)
		}
		if l := coord.Lease("gamma"); !gammaBack && l != nil && strings.Contains(d.logs.String(), `controller=gamma why="lost: another replica took it"`) {
			gammaBack = true
			close(gammaSeen)
		}
	}
}

// leaseBucket opens the replicas' lease bucket on its own connection.
func leaseBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), "VEIL_EXPORTER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestReloadTurnsEventsOnOverTheReplicasConnection: replicas run without events, so their NATS
// connection carries no events stream; a reload that turns events on (NATS unchanged) keeps the
// connection and puts the stream on it, and the controller's events are published.
func TestReloadTurnsEventsOnOverTheReplicasConnection(t *testing.T) {
	ns := testutil.StartNATS(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	sim := veiltest.New(veiltest.Options{Seed: 1, Token: testutil.SecretToken, VMs: 1, InitialEvents: 5})
	t.Cleanup(sim.Close)
	cfgFile := filepath.Join(dir, "veil.yaml")
	write := func(events string) {
		testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", sim.URL, tok))
		f, err := os.OpenFile(cfgFile, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString("ha: {enabled: true, lease_ttl: 3s, instance: pod-a, replicas: 1}\nnats: {url: " + ns.URL() + "}\n" + events)
	}
	write("")
	d := startDaemon(t, cfgFile)
	testutil.Eventually(t, 20*time.Second, func() bool {
		mine, _ := leads(t, d)
		return strings.Join(mine, ",") == "alpha"
	}, "alpha runs here; logs:\n%s", d.logs)
	// Events on: WriteConfig's events section rewritten (YAML refuses a repeated key).
	body, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	on := strings.Replace(string(body), "events:\n  enabled: false\n", "events:\n  enabled: true\n  start: earliest\n  poll_interval: 200ms\n  checkpoint: {store: nats_kv}\n", 1)
	if err := os.WriteFile(cfgFile, []byte(on), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.d.Reload(); err != nil {
		t.Fatalf("reload turning events on: %v\n%s", err, d.logs)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, m := d.get(t, "/metrics")
		return strings.Contains(m, `veil_events_published_total{controller="alpha"`)
	}, "alpha's events published after the reload; logs:\n%s", d.logs)
}

// TestNewBuildsRunStarts: New builds the controllers and starts none; Run starts them, and
// stops them when it returns.
func TestNewBuildsRunStarts(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	sim := veiltest.New(veiltest.Options{Seed: 1, Token: testutil.SecretToken, VMs: 1})
	t.Cleanup(sim.Close)
	cfgFile := filepath.Join(dir, "veil.yaml")
	testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", sim.URL, tok))
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigFile: cfgFile, Logger: log.NewNopLogger(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.controllers) != 1 || d.controllers[0].cancel != nil {
		t.Fatalf("New started a controller (or built none): %d", len(d.controllers))
	}
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = d.Run(context.Background()) }()
	testutil.Eventually(t, 10*time.Second, func() bool { return d.controllers[0].parts.targets.Ready() }, "alpha refreshed once Run started it")
	d.Stop()
	<-runDone
}
