package forwarder

// Events that appear in the journal after newer ones (a transaction committed late, the
// controller's clock stepped back), dated up to settleTime before the controller's clock: each
// is published once, whatever the controller's clock says against this machine's.

import (
	"context"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestEventsListedLateArePublishedOnce(t *testing.T) {
	for _, order := range []string{"oldest_first", "newest_first"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, veiltest.Options{EventsOrder: order, InitialTasks: -1}, order, "earliest")
			r.ev.PollInterval = 50 * time.Millisecond
			rcv := subscribe(t, r.nats.URL())
			fw := r.forwarder()
			fw.reader.settle = settleTime
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- fw.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			want := r.sim.AddEvents(10, veiltest.EventSpec{})
			exactlyOnceInOrder(t, "prod", want, rcv.waitFor(t, len(want), 10*time.Second))
			// Listed below the ten, after they were published: within settleTime of the
			// controller's clock, still above the position.
			late := r.sim.AddEvents(5, veiltest.EventSpec{Late: settleTime - 2*time.Second})
			want = append(want, late...)
			exactlyOnceInOrder(t, "prod", want, rcv.waitFor(t, len(want), 10*time.Second))
			want = append(want, r.sim.AddEvents(5, veiltest.EventSpec{})...)
			exactlyOnceInOrder(t, "prod", want, rcv.waitFor(t, len(want), 10*time.Second))
			// The position moves past them all once the controller's clock is settleTime past.
			last := want[len(want)-1]
			testutil.Eventually(t, settleTime+10*time.Second, func() bool {
				st := fw.Status()
				return len(st.PositionIDs) > 0 && st.PositionIDs[len(st.PositionIDs)-1] == last && st.Backlog == 0
			}, "the position at the newest event once the controller's clock passed it by %s", settleTime)
			if st := fw.Status(); st.Ahead != 0 {
				t.Errorf("%d events said to be ahead of the clock; the controller's clock is this machine's", st.Ahead)
			}
		})
	}
}
