package natsconn

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// embeddedServer starts the embedded server of sync on a free port and a temp dir; the test's
// cleanup stops it.
func embeddedServer(tb testing.TB, sync config.DiskSync) *server.Server {
	tb.Helper()
	srv, err := startEmbedded(config.Embedded{
		Enabled: true, Listen: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(tb)), StoreDir: tb.TempDir(), Sync: sync,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// TestEmbeddedSyncReachesTheServer: nats.embedded.sync is what the embedded JetStream runs
// with; a setting built in code without it keeps NATS's own default.
func TestEmbeddedSyncReachesTheServer(t *testing.T) {
	tests := []struct {
		name         string
		sync         config.DiskSync
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"always", config.DiskSync{Always: true}, true, 2 * time.Minute},
		{"an interval", config.DiskSync{Interval: 1500 * time.Millisecond}, false, 1500 * time.Millisecond},
		{"the configuration's default", config.Default().NATS.Embedded.Sync, false, config.Default().NATS.Embedded.Sync.Interval},
		{"unset keeps NATS's default", config.DiskSync{}, false, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jsc := embeddedServer(t, tt.sync).JetStreamConfig()
			if jsc == nil {
				t.Fatal("the embedded server runs without JetStream")
			}
			if jsc.SyncAlways != tt.wantAlways || jsc.SyncInterval != tt.wantInterval {
				t.Errorf("JetStream syncs always=%v every %v, want always=%v every %v",
					jsc.SyncAlways, jsc.SyncInterval, tt.wantAlways, tt.wantInterval)
			}
		})
	}
}
