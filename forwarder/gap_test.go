package forwarder

import (
	"context"
	"testing"
	"time"

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
