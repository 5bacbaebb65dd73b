// Clients that ask and never read: they cost their own connection, never another client's
// answer or the renders.

package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// stallSocket makes the server's side of a connection buffer little, so that a client that
// does not read blocks the server's writes after a few KiB, not after megabytes.
func stallSocket(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
}

// stalledClients opens n connections that each send GET path and never read.
func stalledClients(t *testing.T, addr, path string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(1 << 10)
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

func stallConfig(t *testing.T, vms int) (*veiltest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 31, Token: testutil.SecretToken, VMs: vms, Nodes: 4})
	t.Cleanup(sim.Close)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(testutil.SecretToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return sim, writeSDConfig(t, dir, "controllers:\n"+testutil.ControllerYAML("alpha", sim.URL, tok)+
		"collect:\n  interval: 1s\nguest:\n  enabled: false\nevents:\n  enabled: false\n")
}

// TestStalledClientsHoldNothing: 45 clients (more than --web.max-requests) ask for /metrics
// and never read. Every other scrape still answers 200 at once, a VM added after they stalled
// reaches /metrics (renders do not wait for them), and the status page and SD answer too. The
// write deadline is an hour here: what is proven is that a stalled client holds no place and
// no render, not that it is dropped (TestWriteDeadlineDropsStalledClient).
func TestStalledClientsHoldNothing(t *testing.T) {
	sim, cfgFile := stallConfig(t, 300)
	d := startDaemonServer(t, cfgFile, HandlerOptions{TelemetryPath: "/metrics", MaxRequests: 40, WriteTimeout: time.Hour}, stallSocket)
	d.waitReady(t)
	if code, body := d.get(t, "/metrics"); code != 200 || len(body) < 256<<10 {
		t.Fatalf("/metrics = %d with %d bytes; the test needs 256 KiB to stall a writer", code, len(body))
	}
	addr := strings.TrimPrefix(d.base, "http://")
	stalledClients(t, addr, "/metrics", 45)
	time.Sleep(2 * time.Second) // every stalled answer has filled its socket by now
	added := sim.AddVMs(1)[0]

	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string, time.Duration, error) {
		start := time.Now()
		resp, err := client.Get(d.base + path)
		if err != nil {
			return 0, "", time.Since(start), err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start), err
	}
	deadline := time.Now().Add(30 * time.Second)
	var slowest time.Duration
	for fresh := false; !fresh; {
		if time.Now().After(deadline) {
			t.Fatalf("VM %s added after the clients stalled is not on /metrics within 30 s (slowest scrape %v)", added, slowest)
		}
		code, body, took, err := get("/metrics")
		if err != nil || code != 200 {
			t.Fatalf("/metrics with 45 stalled clients = %d after %v (%v): %.200s", code, took, err, body)
		}
		slowest = max(slowest, took)
		fresh = strings.Contains(body, `domain_id="`+added+`"`)
		if !fresh {
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("fresh data on /metrics with 45 stalled clients; slowest scrape %v", slowest)
	for _, path := range []string{"/", "/?format=json", "/sd/domains", "/-/healthy"} {
		if code, body, took, err := get(path); err != nil || code != 200 {
			t.Errorf("%s with 45 stalled clients = %d after %v (%v): %.200s", path, code, took, err, body)
		}
	}
}

// TestWriteDeadlineDropsStalledClient: a client that stops reading is dropped once the write
// deadline passes (its connection closed by the server), on /metrics and on SD (the pages whose
// answers are larger than the socket's buffers here).
func TestWriteDeadlineDropsStalledClient(t *testing.T) {
	_, cfgFile := stallConfig(t, 300)
	const timeout = time.Second
	d := startDaemonServer(t, cfgFile, HandlerOptions{TelemetryPath: "/metrics", MaxRequests: 40, WriteTimeout: timeout}, stallSocket)
	d.waitReady(t)
	addr := strings.TrimPrefix(d.base, "http://")
	for _, path := range []string{"/metrics", "/sd/domains"} {
		t.Run(path, func(t *testing.T) {
			c := stalledClients(t, addr, path, 1)[0]
			time.Sleep(timeout + time.Second)
			// What the server sent before the deadline is still to be read, then the end.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var ne net.Error
			n, err := io.Copy(io.Discard, c)
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open %v after the write deadline (%d bytes read)", 10*time.Second+timeout, n)
			}
		})
	}
}
