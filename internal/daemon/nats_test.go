package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestNATSDownAtStartAndReload (NATS connection lifecycle): with NATS unreachable the daemon
// starts and serves the inventory, /-/ready says why events wait (URL without credentials, cause),
// veil_nats_connected is 0 and the log says so once; once NATS runs, the events created
// meanwhile are on the stream exactly once and the log says it connected. A reload to an
// unreachable NATS is accepted and waits the same way.
func TestNATSDownAtStartAndReload(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	sim := veiltest.New(veiltest.Options{Seed: 5, Token: testutil.SecretToken, VMs: 2, InitialEvents: 10, EventsOrder: "oldest_first"})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	config := func(natsAddr string) {
		cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
			"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: nats://bob:n4ts-s3cret@%s\n", natsAddr)
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config(addr)
	d := startDaemon(t, cfgFile)

	testutil.Eventually(t, 15*time.Second, func() bool {
		_, m := d.get(t, "/metrics")
		return strings.Contains(m, `veil_up{controller="alpha"} 1`) && strings.Contains(m, `veil_nats_connected{controller="alpha"} 0`)
	}, "inventory served and veil_nats_connected 0 with NATS down")
	code, body := d.get(t, "/-/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "controller alpha: events are not forwarded") ||
		!strings.Contains(body, "@"+addr) || !strings.Contains(body, "refused") {
		t.Errorf("/-/ready with NATS down = %d %q, want 503 naming the URL and the cause", code, body)
	}
	if n := strings.Count(d.logs.String(), "NATS unreachable"); n != 1 {
		t.Errorf("%d lines saying NATS is unreachable, want 1:\n%s", n, d.logs.String())
	}

	ns := startNATSAt(t, addr)
	d.waitReady(t)
	want := sim.EventCount()
	testutil.Eventually(t, 15*time.Second, func() bool { return streamMsgs(addr, "VEIL_EVENTS") == want }, "%d events on the stream", want)
	if n := strings.Count(d.logs.String(), "NATS connected"); n != 1 {
		t.Errorf("%d lines saying NATS connected, want 1:\n%s", n, d.logs.String())
	}

	// A reload to a NATS that cannot be reached is not refused: forwarding waits and says why.
	other := freeAddr(t)
	config(other)
	if code, body := d.do(t, http.MethodPost, "/-/reload"); code != 200 {
		t.Fatalf("reload to an unreachable NATS = %d %s", code, body)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		code, body := d.get(t, "/-/ready")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "@"+other)
	}, "/-/ready naming the unreachable NATS after the reload")
	if strings.Contains(d.logs.String(), "n4ts-s3cret") {
		t.Errorf("the NATS password is logged:\n%s", d.logs.String())
	}
	ns.Shutdown()
}

// startNATSAt runs a JetStream server on addr.
func startNATSAt(t *testing.T, addr string) *server.Server {
	t.Helper()
	host, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	ns, err := server.NewServer(&server.Options{Host: host, Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// TestReloadReconnectsForReplacedNATSFiles (NATS connection lifecycle): a reload with the same
// configuration text keeps the NATS connection and the controller while the CA file is the same,
// and reconnects (rebuilding the forwarder) once the file holds another certificate.
func TestReloadReconnectsForReplacedNATSFiles(t *testing.T) {
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 5, Token: testutil.SecretToken, VMs: 2, InitialEvents: 3, EventsOrder: "oldest_first"})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	ca := filepath.Join(dir, "nats-ca.pem")
	writeCA := func() {
		if err := os.WriteFile(ca, selfSignedPEM(t), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCA()
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  checkpoint: {store: file, dir: %q}\n", dir) +
		fmt.Sprintf("nats:\n  url: nats://%s\n  tls: {ca_file: %q}\n", freeAddr(t), ca)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgFile)
	reload := func() string {
		t.Helper()
		before := strings.Count(d.logs.String(), "configuration reloaded")
		if code, body := d.do(t, http.MethodPost, "/-/reload"); code != 200 {
			t.Fatalf("reload = %d %s", code, body)
		}
		testutil.Eventually(t, 10*time.Second, func() bool { return strings.Count(d.logs.String(), "configuration reloaded") > before }, "the reload logged")
		lines := strings.Split(strings.TrimSpace(d.logs.String()), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], "configuration reloaded") {
				return lines[i]
			}
		}
		return ""
	}
	if line := reload(); !strings.Contains(line, "kept=alpha") {
		t.Errorf("unchanged CA file: %s, want alpha kept", line)
	}
	writeCA()
	if line := reload(); !strings.Contains(line, "started=alpha") {
		t.Errorf("replaced CA file: %s, want alpha started on a new connection", line)
	}
	if line := reload(); !strings.Contains(line, "kept=alpha") {
		t.Errorf("CA file unchanged since the last reload: %s, want alpha kept", line)
	}
}

// selfSignedPEM is a new self-signed CA certificate, different on every call.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestAConnectionTheServerClosesIsDialledAgain: a server error the NATS client does not reconnect
// from (here a protocol line over max_control_line) closes the connection for good; the daemon
// says so (log, /-/healthy until mended), dials a new one on its own, and forwarding goes on:
// the events created meanwhile reach the stream.
func TestAConnectionTheServerClosesIsDialledAgain(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	startNATSAt(t, addr)
	sim := veiltest.New(veiltest.Options{Seed: 5, Token: testutil.SecretToken, VMs: 2, InitialEvents: 5, EventsOrder: "oldest_first"})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: file, dir: %q}\n", dir) +
		fmt.Sprintf("nats:\n  url: nats://%s\n", addr)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgFile)
	d.waitReady(t)
	testutil.Eventually(t, 15*time.Second, func() bool { return streamMsgs(addr, "VEIL_EVENTS") == sim.EventCount() }, "the first events on the stream")

	d.d.mu.RLock()
	conn := d.d.conn.Conn
	d.d.mu.RUnlock()
	_ = conn.NATS().Publish("x."+strings.Repeat("y", 8192), nil) // the server ends the connection
	select {
	case <-conn.Lost():
	case <-time.After(15 * time.Second):
		t.Fatal("the connection the server closed is not seen as lost")
	}
	if conn.LostReason() == "" {
		t.Error("no reason given for the lost connection")
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		d.d.mu.RLock()
		defer d.d.mu.RUnlock()
		return d.d.conn != nil && d.d.conn.Conn != conn && d.d.conn.Connected()
	}, "a new connection dialled")
	sim.AddEvents(5, veiltest.EventSpec{})
	testutil.Eventually(t, 15*time.Second, func() bool { return streamMsgs(addr, "VEIL_EVENTS") == sim.EventCount() }, "the events created after on the stream")
	if code, body := d.get(t, "/-/healthy"); code != http.StatusOK {
		t.Errorf("/-/healthy after the redial = %d %s", code, body)
	}
	// Said once by the connection (a forwarder that failed meanwhile quotes it in its own line).
	if n := strings.Count(d.logs.String(), "connection was closed for good after a server error"); n != 1 {
		t.Errorf("%d lines saying the connection was closed for good, want 1:\n%s", n, d.logs.String())
	}
}

// TestInventoryBucketWithoutEventsOrReplicas: a nats: section alone (events and replicas off)
// connects NATS for the inventory bucket, which then holds the controller's objects; with
// nats.inventory.enabled false nothing is dialled for it.
func TestInventoryBucketWithoutEventsOrReplicas(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	startNATSAt(t, addr)
	sim := veiltest.New(veiltest.Options{Seed: 5, Token: testutil.SecretToken, VMs: 3})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\nevents:\n  enabled: false\n" +
		fmt.Sprintf("nats:\n  url: nats://%s\n", addr)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgFile)
	d.waitReady(t)
	// 3 VMs and the simulator's nodes, clusters and datapools: more than 3 keys.
	testutil.Eventually(t, 15*time.Second, func() bool { return streamMsgs(addr, "KV_VEIL_INVENTORY") > 3 },
		"the inventory bucket written with events and replicas off")

	off := strings.Replace(cfg, "nats:\n", "nats:\n  inventory: {enabled: false}\n", 1)
	if err := os.WriteFile(cfgFile, []byte(off), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := d.do(t, http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("reload = %d %s", code, body)
	}
	d.d.mu.RLock()
	conn := d.d.conn
	d.d.mu.RUnlock()
	if conn != nil {
		t.Error("NATS still connected with the inventory bucket off and nothing else using it")
	}
}

// TestEmbeddedNATSExposure: the embedded server (which has no authentication) is warned about
// when it listens beyond loopback, and only then.
func TestEmbeddedNATSExposure(t *testing.T) {
	tests := []struct {
		listen string
		warn   bool
	}{
		{"127.0.0.1:4222", false},
		{"[::1]:4222", false},
		{"localhost:4222", false},
		{"127.0.0.5:4222", false},
		{":4222", true},
		{"0.0.0.0:4222", true},
		{"[::]:4222", true},
		{"10.1.2.3:4222", true},
		{"nats.example:4222", true},
	}
	for _, tt := range tests {
		why := natsconn.EmbeddedExposure(config.Embedded{Enabled: true, Listen: tt.listen})
		if (why != "") != tt.warn || tt.warn && !strings.Contains(why, "without authentication") {
			t.Errorf("listen %s: warning %q, want one: %v", tt.listen, why, tt.warn)
		}
	}
	if why := natsconn.EmbeddedExposure(config.Embedded{Listen: ":4222"}); why != "" {
		t.Errorf("no embedded server, yet %q", why)
	}
}
