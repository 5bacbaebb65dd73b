package forwarder

import (
	"context"
	"strings"
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

// TestOutageLoggedOnStateChange proves a NATS outage (a failed cycle every second) gives one
// warning when it starts and one line when it ends, not one per retry.
func TestOutageLoggedOnStateChange(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	rec := subscribe(t, r.nats.url())
	var logs logBuffer
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, NATS: r.nc, Conn: r.conn, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	want := r.sim.AddEvents(5, veiltest.EventSpec{})
	rec.waitFor(t, len(want), 10*time.Second)
	r.nats.stop()
	want = append(want, r.sim.AddEvents(5, veiltest.EventSpec{})...)
	time.Sleep(3500 * time.Millisecond) // at least three failed cycles
	r.nats.start()
	exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
	out := logs.String()
	failed := strings.Count(out, "event forwarding failed") + strings.Count(out, "event forwarding still failing")
	if failed != 1 || strings.Count(out, "event forwarding recovered") != 1 {
		t.Fatalf("want one failure line and one recovery line, got:\n%s", out)
	}
	if !strings.Contains(out, "NATS is not connected") {
		t.Errorf("the failure line does not say why:\n%s", out)
	}
}

// TestFailureLogThrottles proves which failures of a run are logged: the first, then one every
// failureLogEvery, and that a recovery starts a new run.
func TestFailureLogThrottles(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var f failureLog
	steps := []struct {
		name          string
		at            time.Duration
		recover       bool
		first, remind bool // for a failure; for a recovery, first means "recovery reported"
	}{
		{"the first failure is logged", 0, false, true, false},
		{"a retry a second later is not", time.Second, false, false, false},
		{"nor one just short of the interval", failureLogEvery - time.Second, false, false, false},
		{"a reminder once the interval passed", failureLogEvery, false, false, true},
		{"no second reminder right after", failureLogEvery + time.Second, false, false, false},
		{"recovery ends the run", failureLogEvery + 2*time.Second, true, true, false},
		{"a failure after recovery is a first again", failureLogEvery + 3*time.Second, false, true, false},
	}
	for _, s := range steps {
		if s.recover {
			if ok, n, since := f.recovered(); ok != s.first || n != 5 || !since.Equal(t0) {
				t.Fatalf("%s: recovered() = %v, %d failures since %v", s.name, ok, n, since)
			}
			if ok, _, _ := f.recovered(); ok {
				t.Fatalf("%s: a second recovery reported", s.name)
			}
			continue
		}
		if first, remind, _, _ := f.failed(t0.Add(s.at)); first != s.first || remind != s.remind {
			t.Fatalf("%s: first %v remind %v, want %v %v", s.name, first, remind, s.first, s.remind)
		}
	}
}
