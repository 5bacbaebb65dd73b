package natsconn

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

func natsConfig(url string) config.NATS {
	c := config.Default().NATS
	c.URL = url
	return c
}

// TestFilesChanged proves a replaced credential file is noticed though the configuration text is
// the same, and an untouched one is not.
func TestFilesChanged(t *testing.T) {
	ns := testutil.StartNATS(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := natsConfig(ns.URL())
	cfg.JetStream.Enabled = false
	// The digests are taken from the config alone: a Conn whose files are recorded but that is
	// connected without TLS (a CA that is not PEM would fail the connect).
	conn, err := Connect(cfg, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	conn.cfg.TLS = config.NATSTLS{CAFile: ca}
	conn.files = fileDigests(conn.cfg)
	if conn.FilesChanged() {
		t.Fatal("unchanged file reported as changed")
	}
	if err := os.WriteFile(ca, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !conn.FilesChanged() {
		t.Fatal("replaced file not noticed")
	}
	conn.files = fileDigests(conn.cfg)
	if err := os.Remove(ca); err != nil {
		t.Fatal(err)
	}
	if !conn.FilesChanged() {
		t.Fatal("removed file not noticed")
	}
}

// TestGenerationCountsReconnects proves a reconnect starts a new generation: how users learn that
// what they set up on the server (a stream checked) may be gone.
func TestGenerationCountsReconnects(t *testing.T) {
	ns := testutil.StartNATS(t)
	cfg := natsConfig(ns.URL())
	cfg.JetStream.Enabled = false
	conn, err := Connect(cfg, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if !conn.Connected() || conn.Generation() != 0 {
		t.Fatalf("connected %v in generation %d, want the first (0)", conn.Connected(), conn.Generation())
	}
	ns.Stop()
	// The failure is recorded by a callback queued after the one of the first connection.
	testutil.Eventually(t, 10*time.Second, func() bool { return conn.Status().LastError != "" }, "the disconnection recorded")
	before := conn.Generation()
	ns.Start()
	testutil.Eventually(t, 20*time.Second, func() bool { return conn.Connected() && conn.Generation() > before },
		"a new generation once reconnected (was %d)", before)
}
