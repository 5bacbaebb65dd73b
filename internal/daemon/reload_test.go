package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// freeAddr returns a 127.0.0.1 address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// embeddedConfig forwards the events of one simulator through an embedded NATS server.
func embeddedConfig(simURL, tok, checkpointDir, listen, storeDir, stream string, createStream bool) string {
	return "controllers:\n" + testutil.ControllerYAML("alpha", simURL, tok) +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: file, dir: %q}\n", checkpointDir) +
		fmt.Sprintf("nats:\n  jetstream: {stream: %s, create_stream: %t}\n  embedded: {enabled: true, listen: %q, store_dir: %q}\n",
			stream, createStream, listen, storeDir)
}

// streamMsgs counts the messages of stream on the server at addr with a connection of its own,
// so that it does not depend on a client surviving the server's restarts; -1 when unreachable.
func streamMsgs(addr, stream string) int {
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(time.Second))
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// TestFailedReloadKeepsForwarding: a reload whose NATS cannot be set up is refused and the
// previous configuration goes on forwarding (whether it could stay up meanwhile or had to be
// stopped for the new embedded server and restarted), and reloading the good file works.
func TestFailedReloadKeepsForwarding(t *testing.T) {
	tests := []struct {
		name string
		// bad returns the refused configuration given the good one's listen address and store.
		bad     func(t *testing.T, dir, simURL, tok, listen, store string) string
		wantErr string
	}{
		{
			name: "new embedded port taken: the old server never stops",
			bad: func(t *testing.T, dir, simURL, tok, listen, store string) string {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return embeddedConfig(simURL, tok, dir, l.Addr().String(), filepath.Join(dir, "nats2"), "VEIL_EVENTS", true)
			},
			wantErr: "nats.embedded.listen",
		},
		{
			name: "same embedded port, new stream missing: the old server is restarted",
			bad: func(t *testing.T, dir, simURL, tok, listen, store string) string {
				return embeddedConfig(simURL, tok, dir, listen, store, "NO_SUCH_STREAM", false)
			},
			wantErr: "NO_SUCH_STREAM",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sim := veiltest.New(veiltest.Options{Seed: 4, Token: testutil.SecretToken, VMs: 3, InitialEvents: 20, EventsOrder: "oldest_first"})
			defer sim.Close()
			tok := filepath.Join(dir, "token")
			os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
			listen, store := freeAddr(t), filepath.Join(dir, "nats")
			good := embeddedConfig(sim.URL, tok, dir, listen, store, "VEIL_EVENTS", true)
			cfgFile := filepath.Join(dir, "veil.yaml")
			if err := os.WriteFile(cfgFile, []byte(good), 0o600); err != nil {
				t.Fatal(err)
			}

			d := startDaemon(t, cfgFile)
			d.waitReady(t)
			forwarded := func(what string) {
				t.Helper()
				want := sim.EventCount()
				var got int
				testutil.Eventually(t, 15*time.Second, func() bool { got = streamMsgs(listen, "VEIL_EVENTS"); return got == want }, "%s", what)
			}
			forwarded("the initial events on NATS")

			if err := os.WriteFile(cfgFile, []byte(tt.bad(t, dir, sim.URL, tok, listen, store)), 0o600); err != nil {
				t.Fatal(err)
			}
			code, body := d.do(t, http.MethodPost, "/-/reload")
			if code != http.StatusInternalServerError || !strings.Contains(body, tt.wantErr) {
				t.Fatalf("bad reload = %d %q, want 500 naming %q", code, body, tt.wantErr)
			}
			stillRuns(t, d)
			sim.AddEvents(10, veiltest.EventSpec{Type: "info"})
			forwarded("events added after the refused reload on NATS")

			if err := os.WriteFile(cfgFile, []byte(good), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, body := d.do(t, http.MethodPost, "/-/reload"); code != 200 {
				t.Fatalf("reload of the good config = %d %s", code, body)
			}
			d.waitReady(t)
			sim.AddEvents(5, veiltest.EventSpec{Type: "warning"})
			forwarded("events added after the good reload on NATS")
			if code, body := d.get(t, "/-/healthy"); code != 200 {
				t.Errorf("/-/healthy after the good reload = %d %s", code, body)
			}
		})
	}
}

func TestSharesEmbedded(t *testing.T) {
	tests := []struct {
		name       string
		a, b       string // listen addresses
		storeA     string
		storeB     string
		embeddedB  bool
		wantShares bool
	}{
		{"same address", "127.0.0.1:4222", "127.0.0.1:4222", "/a", "/b", true, true},
		{"same port on another host still collides on a wildcard", "0.0.0.0:4222", "127.0.0.1:4222", "/a", "/b", true, true},
		{"same store on another port", "127.0.0.1:4222", "127.0.0.1:4223", "/a", "/a/", true, true},
		{"other port and store", "127.0.0.1:4222", "127.0.0.1:4223", "/a", "/b", true, false},
		{"random ports never collide", "127.0.0.1:0", "127.0.0.1:0", "/a", "/b", true, false},
		{"new one not embedded", "127.0.0.1:4222", "127.0.0.1:4222", "/a", "/a", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := embeddedNATS(tt.a, tt.storeA, true), embeddedNATS(tt.b, tt.storeB, tt.embeddedB)
			if got := sharesEmbedded(a, b); got != tt.wantShares {
				t.Errorf("sharesEmbedded = %v, want %v", got, tt.wantShares)
			}
		})
	}
}

func embeddedNATS(listen, store string, enabled bool) config.NATS {
	n := config.Default().NATS
	n.Embedded = config.Embedded{Enabled: enabled, Listen: listen, StoreDir: store}
	return n
}

// stillRuns checks that after a refused reload the status lists the one controller and NATS,
// and the daemon is ready and healthy.
func stillRuns(t *testing.T, d *daemonUnderTest) {
	t.Helper()
	var st struct {
		Controllers []struct {
			Name string `json:"name"`
		} `json:"controllers"`
		NATS *struct {
			Connected bool `json:"connected"`
		} `json:"nats"`
	}
	_, js := d.get(t, "/?format=json")
	if err := json.Unmarshal([]byte(js), &st); err != nil || len(st.Controllers) != 1 || st.NATS == nil {
		t.Errorf("after the refused reload the status lacks the controller or NATS (%v): %s", err, js)
	}
	d.waitReady(t)
	if code, body := d.get(t, "/-/healthy"); code != 200 {
		t.Errorf("/-/healthy after the refused reload = %d %s", code, body)
	}
}
