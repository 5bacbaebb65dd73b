package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestEndpointsWithoutControllers: a daemon running no controller (as after a reload that could
// not restore anything) is neither healthy nor ready, its JSON lists no controllers as [], and
// the status page answers GET and HEAD on / only.
func TestEndpointsWithoutControllers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newDaemon(ctx, "veil.yaml", log.NewNopLogger(), "test")
	srv := httptest.NewServer(d.Handler(HandlerOptions{TelemetryPath: "/metrics"}))
	defer srv.Close()

	tests := []struct {
		name       string
		method     string
		path       string
		wantCode   int
		wantInBody string
		wantAllow  string
	}{
		{"healthy fails with no controller", http.MethodGet, "/-/healthy", 503, "no controller runs", ""},
		{"ready fails with no controller", http.MethodGet, "/-/ready", 503, "no controller runs", ""},
		{"json lists no controllers as an empty array", http.MethodGet, "/?format=json", 200, `"controllers": []`, ""},
		{"status page answers GET", http.MethodGet, "/", 200, "<html", ""},
		{"status page answers HEAD", http.MethodHead, "/", 200, "", ""},
		{"status page refuses POST", http.MethodPost, "/", 405, "", "GET, HEAD"},
		{"status page refuses DELETE", http.MethodDelete, "/", 405, "", "GET, HEAD"},
		{"other paths are not found", http.MethodGet, "/nope", 404, "", ""},
		{"other paths are not found for POST either", http.MethodPost, "/status", 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantInBody) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, resp.StatusCode, b, tt.wantCode, tt.wantInBody)
			}
			if got := resp.Header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

// TestHealthyFailsWhenForwarderStops: once another instance moves the nats_kv position, the
// forwarder stops for good and /-/healthy says so, so that a supervisor can act.
func TestHealthyFailsWhenForwarderStops(t *testing.T) {
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer ns.Shutdown()
	sim := veiltest.New(veiltest.Options{Seed: 5, Token: testutil.SecretToken, VMs: 2, InitialEvents: 10, EventsOrder: "oldest_first"})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
		"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
		fmt.Sprintf("nats:\n  url: %s\n", ns.ClientURL())
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgFile)
	d.waitReady(t)

	js := testutil.JetStream(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var kv jetstream.KeyValue
	testutil.Eventually(t, 15*time.Second, func() bool {
		if kv == nil {
			kv, _ = js.KeyValue(ctx, forwarder.PositionsBucket)
		}
		if kv == nil {
			return false
		}
		_, err := kv.Get(ctx, "alpha")
		return err == nil
	}, "the position stored")
	if code, body := d.get(t, "/-/healthy"); code != 200 {
		t.Fatalf("/-/healthy while forwarding = %d %s", code, body)
	}

	// Another instance writes the position; the next save of ours is refused.
	if _, err := kv.Put(ctx, "alpha", []byte(`{"writer":"someone-else"}`)); err != nil {
		t.Fatal(err)
	}
	sim.AddEvents(3, veiltest.EventSpec{Type: "info"})
	var code int
	var body string
	testutil.Eventually(t, 15*time.Second, func() bool { code, body = d.get(t, "/-/healthy"); return code == 503 }, "/-/healthy to fail")
	if !strings.Contains(body, "controller alpha: event forwarder stopped") {
		t.Errorf("/-/healthy = %d %q, want the stopped forwarder named", code, body)
	}
}
