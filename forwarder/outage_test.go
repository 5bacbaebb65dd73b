package forwarder

import (
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestBacklogGrowsWhileNATSIsAway proves veil_events_backlog follows the journal during a NATS
// outage (when its alert matters) and falls back to 0 once everything is published.
func TestBacklogGrowsWhileNATSIsAway(t *testing.T) {
	for _, order := range []string{"oldest_first", "newest_first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: order, InitialTasks: -1}, "auto", "earliest")
			rec := subscribe(t, r.nats.url())
			want := r.sim.AddEvents(20, veiltest.EventSpec{})
			fw, stop := r.run()
			t.Cleanup(stop)
			rec.waitFor(t, len(want), 10*time.Second)
			r.nats.stop()
			for r.conn.Connected() {
				time.Sleep(10 * time.Millisecond)
			}
			for _, wantBacklog := range []int{30, 55} {
				want = append(want, r.sim.AddEvents(wantBacklog-(len(want)-20), veiltest.EventSpec{})...)
				waitBacklog(t, fw, wantBacklog)
			}
			r.nats.start()
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
			waitBacklog(t, fw, 0)
		})
	}
}

func waitBacklog(t *testing.T, fw *Forwarder, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fw.Status().Backlog != want {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d, want %d", fw.Status().Backlog, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
