package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestFlagsVersionAndConfigCheck(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	good := filepath.Join(dir, "good.yaml")
	testutil.WriteConfig(t, good, testutil.ControllerYAML("a", "http://127.0.0.1:1", tok))
	haCfg := filepath.Join(dir, "ha.yaml")
	testutil.WriteConfig(t, haCfg, testutil.ControllerYAML("a", "http://127.0.0.1:1", tok)+"ha: {enabled: true}\n")
	haEmbedded := filepath.Join(dir, "ha-embedded.yaml")
	testutil.WriteConfig(t, haEmbedded, testutil.ControllerYAML("a", "http://127.0.0.1:1", tok)+"ha: {enabled: true}\nnats: {embedded: {enabled: true}}\n")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("controllers:\n  - name: a\n    url: http://x\n    token_file: "+filepath.Join(dir, "missing")+"\n    colour: red\n"), 0o600)
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		want    string // in stdout or the error
	}{
		{"version prints and exits", []string{"--version"}, false, "veil-exporter, version"},
		{"help exits 0", []string{"--help"}, false, "--web.listen-address"},
		{"old single-dash spellings still parse", []string{"-config.check", "-config.file", good}, false, "OK (1 controllers)"},
		{"good config passes", []string{"--config.check", "--config.file", good}, false, "OK (1 controllers)"},
		{"bad config names line and key", []string{"--config.check", "--config.file", bad}, true, "line 5"},
		{"missing token file is reported", []string{"--config.check", "--config.file", strings.Replace(bad, "bad", "good", 1) + ".nope"}, true, "no such file"},
		{"replicas on an external NATS pass", []string{"--config.check", "--config.file", haCfg}, false, "OK (1 controllers)"},
		{"replicas on the single-node embedded NATS are refused", []string{"--config.check", "--config.file", haEmbedded}, true, "cannot be used with nats.embedded.enabled"},
		{"and refused at start too", []string{"--config.file", haEmbedded, "--web.listen-address", "127.0.0.1:0"}, true, "cannot be used with nats.embedded.enabled"},
		{"unknown flag", []string{"--web.listen"}, true, "unknown long flag"},
		{"bad log level", []string{"--log.level", "loud", "--config.file", good}, true, "unrecognized log level loud"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errb, nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			text := out.String() + errb.String()
			if err != nil {
				text += err.Error()
			}
			if !strings.Contains(text, tt.want) {
				t.Errorf("output %q does not contain %q", text, tt.want)
			}
		})
	}
}

// TestConfigCheckWarnsWhereAcknowledgedEventsCanBeLost proves that --config.check warns, and
// still passes, where a power loss of NATS can drop acknowledged events (a single-replica stream
// on a server that does not sync every write), and stays quiet where it cannot or cannot know.
func TestConfigCheckWarnsWhereAcknowledgedEventsCanBeLost(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	const (
		embedded = "nats.embedded.sync is 1s and the embedded server's stream has 1 replica: a power loss of this host can drop the events acknowledged in the last 1s; they will be republished from the journal while it still holds them. Set nats.embedded.sync: always if even a republish is unwanted."
		external = "the stream VEIL_EVENTS, when veil-exporter creates it, has 1 replica (without ha): if the NATS server's sync_interval is not always, a power loss can drop acknowledged events; they will be republished from the journal while it still holds them. To avoid it, enable ha with ha.replicas: 3 on a 3-node NATS cluster, or set sync_interval: always on the server."
		haOne    = "the stream VEIL_EVENTS, when veil-exporter creates it, has 1 replica (ha.replicas: 1): if the NATS server's sync_interval is not always, a power loss can drop acknowledged events; they will be republished from the journal while it still holds them. To avoid it, set ha.replicas: 3 on a 3-node NATS cluster, or set sync_interval: always on the server."
	)
	kv := "events: {enabled: true, checkpoint: {store: nats_kv}}\n"
	file := "events: {enabled: true, checkpoint: {store: file, dir: " + filepath.Join(dir, "state") + "}}\n"
	tests := []struct {
		name, yaml string
		want       string // the one warning; "" none
	}{
		{"embedded server syncing every second", file + "nats: {embedded: {enabled: true, store_dir: " + filepath.Join(dir, "nats") + ", sync: 1s}}\n", embedded},
		{"embedded server syncing every write", file + "nats: {embedded: {enabled: true, store_dir: " + filepath.Join(dir, "nats") + ", sync: always}}\n", ""},
		{"external server, stream created without ha", file, external},
		{"external cluster, stream created with ha.replicas 1", kv + "ha: {enabled: true}\n", haOne},
		{"external cluster, stream created with ha.replicas 3", kv + "ha: {enabled: true, replicas: 3}\n", ""},
		{"the operator's stream", file + "nats: {jetstream: {create_stream: false}}\n", ""},
		{"core NATS acknowledges nothing", file + "nats: {jetstream: {enabled: false}}\n", ""},
		{"events off", "events: {enabled: false}\n", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
			body := "controllers:\n" + testutil.ControllerYAML("a", "http://127.0.0.1:1", tok) + "guest: {enabled: false}\n" + tt.yaml
			if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"--config.check", "--config.file", cfg}, &out, &errb, nil); err != nil {
				t.Fatalf("a warning is no error: %v\n%s", err, body)
			}
			var want []string
			if tt.want != "" {
				want = append(want, cfg+": WARNING: "+tt.want)
			}
			want = append(want, cfg+": OK (1 controllers)")
			if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); !slices.Equal(got, want) {
				t.Errorf("output\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if errb.Len() != 0 {
				t.Errorf("stderr %q", errb.String())
			}
		})
	}
}

type daemonUnderTest struct {
	base string
	logs *testutil.SyncBuffer
	stop func()
}

func startDaemon(t *testing.T, configFile string, extraArgs ...string) *daemonUnderTest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testutil.SyncBuffer{}
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		args := append([]string{"--config.file", configFile, "--web.listen-address", "127.0.0.1:0", "--log.level", "debug"}, extraArgs...)
		errc <- run(ctx, args, io.Discard, logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("daemon exited: %v\n%s", err, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not listen")
	}
	d := &daemonUnderTest{base: "http://" + addr, logs: logs}
	d.stop = func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}
	t.Cleanup(func() { d.stop() })
	return d
}

func (d *daemonUnderTest) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return d.do(t, http.MethodGet, path)
}

func (d *daemonUnderTest) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	return testutil.Do(t, method, d.base+path)
}

func (d *daemonUnderTest) waitReady(t *testing.T) {
	t.Helper()
	testutil.WaitReady(t, d.base, d.logs)
}

// TestDaemonEndToEnd runs the daemon in-process against two simulators: endpoints, the status
// page, a refused bad reload, a good reload adding a controller, one broken controller not
// affecting the other, and no secret anywhere.
func TestDaemonEndToEnd(t *testing.T) {
	dir := t.TempDir()
	simA := veiltest.New(veiltest.Options{Seed: 1, Token: testutil.SecretToken, VMs: 4})
	defer simA.Close()
	simB := veiltest.New(veiltest.Options{Seed: 2, Token: testutil.SecretToken, VMs: 6})
	defer simB.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("jwt "+testutil.SecretToken+"\n"), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", simA.URL, tok))

	d := startDaemon(t, cfgFile, "--web.enable-lifecycle")
	d.waitReady(t)

	checkEndpoints(t, d)

	// A bad config is refused and the old one keeps running.
	os.WriteFile(cfgFile, []byte("controllers:\n  - name: alpha\n    url: "+simA.URL+"\n    token_file: "+tok+"\n    bogus: 1\n"), 0o600)
	if code, body := d.do(t, http.MethodPost, "/-/reload"); code != 500 || !strings.Contains(body, "bogus") {
		t.Errorf("bad reload = %d %s", code, body)
	}
	_, metrics := d.get(t, "/metrics")
	if !strings.Contains(metrics, "veil_config_last_reload_successful 0") || !strings.Contains(metrics, `veil_up{controller="alpha"} 1`) {
		t.Errorf("after a bad reload want reload_successful 0 and alpha still up")
	}
	if _, page := d.get(t, "/"); !strings.Contains(page, "Last reload refused") {
		t.Error("status page does not show the refused reload")
	}

	// A good config adds a controller.
	testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", simA.URL, tok), testutil.ControllerYAML("beta", simB.URL, tok))
	if code, body := d.do(t, http.MethodPost, "/-/reload"); code != 200 {
		t.Fatalf("good reload = %d %s", code, body)
	}
	d.waitReady(t)
	_, metrics = d.get(t, "/metrics")
	for _, want := range []string{`veil_up{controller="alpha"} 1`, `veil_up{controller="beta"} 1`, "veil_config_last_reload_successful 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("after reload /metrics lacks %s", want)
		}
	}

	// Break alpha: beta stays up, alpha keeps its last data with veil_up 0, then recovers.
	breakAlpha(t, d, simA)

	_, page := d.get(t, "/")
	_, js := d.get(t, "/?format=json")
	_, metrics = d.get(t, "/metrics")
	d.stop()
	d.stop = func() {}
	for what, text := range map[string]string{"/metrics": metrics, "/": page, "json status": js, "logs": d.logs.String()} {
		if strings.Contains(text, testutil.SecretToken) {
			t.Errorf("the token appears in %s", what)
		}
	}
	logs := d.logs.String()
	if !strings.Contains(logs, "controller down") || !strings.Contains(logs, "controller back up") {
		t.Errorf("state changes not logged:\n%s", logs)
	}
	// Alpha's only: a refresh of beta cut short by the shutdown may be logged too (collector
	// logs a cancelled refresh as a failure).
	if strings.Count(logs, `controller=alpha msg="controller down`) != 1 {
		t.Errorf("want one 'controller down' line of alpha, logs:\n%s", logs)
	}
}

// breakAlpha: alpha failing, beta stays up and alpha keeps its last data with veil_up 0, then
// recovers.
func breakAlpha(t *testing.T, d *daemonUnderTest, simA *veiltest.Server) {
	t.Helper()
	simA.SetFaults(veiltest.Fault{Kind: "status", Status: 500})
	testutil.Eventually(t, 15*time.Second, func() bool {
		_, m := d.get(t, "/metrics")
		return strings.Contains(m, `veil_up{controller="alpha"} 0`)
	}, "alpha down")
	_, metrics := d.get(t, "/metrics")
	if !strings.Contains(metrics, `veil_up{controller="beta"} 1`) {
		t.Error("beta affected by alpha's failure")
	}
	if n := strings.Count(metrics, `veil_domain_info{controller="alpha"`); n != 4 {
		t.Errorf("alpha's last data not kept: %d domain_info series", n)
	}
	simA.ClearFaults()
	testutil.Eventually(t, 15*time.Second, func() bool {
		_, m := d.get(t, "/metrics")
		return strings.Contains(m, `veil_up{controller="alpha"} 1`)
	}, "alpha back up")
}

// checkEndpoints: /metrics, the lifecycle endpoints, the status page and its JSON of one controller up.
func checkEndpoints(t *testing.T, d *daemonUnderTest) {
	t.Helper()
	code, metrics := d.get(t, "/metrics")
	for _, want := range []string{`veil_up{controller="alpha"} 1`, `veil_exporter_build_info{`, `veil_config_last_reload_successful 1`, "go_goroutines", `veil_api_requests_total{code="200",controller="alpha",endpoint="/api/domains/"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if code, body := d.get(t, "/-/healthy"); code != 200 {
		t.Errorf("/-/healthy = %d %s", code, body)
	}
	if code, _ := d.get(t, "/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload = %d, want 405", code)
	}
	code, page := d.get(t, "/")
	if code != 200 || !strings.Contains(page, `<h2>alpha <span class="badge ok">up</span>`) || !strings.Contains(page, "<td class=\"n\">4 / 4</td>") {
		t.Errorf("status page (%d) does not show the controller and its counts:\n%s", code, page)
	}
	if code, js := d.get(t, "/?format=json"); code != 200 || !strings.Contains(js, `"name": "alpha"`) {
		t.Errorf("json status (%d): %s", code, js)
	}
	if code, _ := d.get(t, "/nope"); code != 404 {
		t.Errorf("/nope = %d", code)
	}
}
