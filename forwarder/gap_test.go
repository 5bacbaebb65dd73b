package forwarder

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestGapEpisodeAfterBlindOutage: the exporter stopped while retention deleted the position's
// event and every event it had seen; on start the loss cannot be counted, and that is counted
// as one gap episode (not silently 0) with the instants between which events may be missing,
// while what is still listed is published exactly once.
func TestGapEpisodeAfterBlindOutage(t *testing.T) {
	for _, order := range []string{"oldest_first", "newest_first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: order, EventsRetention: 100, InitialTasks: -1}, "auto", "earliest")
			rec := subscribe(t, r.nats.URL())
			first := r.sim.AddEvents(20, veiltest.EventSpec{})
			fw, stop := r.run()
			rec.waitFor(t, len(first), 10*time.Second)
			testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published == 20 }, "20 events published")
			before := fw.Status().Position
			stop()
			later := r.sim.AddEvents(500, veiltest.EventSpec{}) // retention keeps the newest 100
			pg, err := r.cli.EventsPage(context.Background(), 0, 1, "created")
			if err != nil || len(pg.Results) != 1 {
				t.Fatalf("oldest event: %v %v", pg, err)
			}
			oldest := pg.Results[0].Created.Time

			fw, stop = r.run()
			t.Cleanup(stop)
			exactlyOnceInOrder(t, "prod", append(first, later[400:]...), rec.waitFor(t, 120, 20*time.Second))
			st := fw.Status()
			if st.GapEpisodes != 1 || gaugeValue(t, fw, "veil_events_gap_episodes_total") != 1 {
				t.Fatalf("gap episodes %d, want 1", st.GapEpisodes)
			}
			g := st.LastGap
			if g.At.IsZero() || !g.After.Equal(before) || !g.Before.Equal(oldest) {
				t.Errorf("last episode %+v, want after %v and before %v", g, before, oldest)
			}
			// Published on: the position is anchored again, no further episode.
			more := r.sim.AddEvents(5, veiltest.EventSpec{})
			exactlyOnceInOrder(t, "prod", append(append(first, later[400:]...), more...), rec.waitFor(t, 125, 10*time.Second))
			if st := fw.Status(); st.GapEpisodes != 1 {
				t.Errorf("gap episodes %d after publishing on, want still 1", st.GapEpisodes)
			}
		})
	}
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
