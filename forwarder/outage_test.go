package forwarder

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestBacklogGrowsWhileNATSIsAway proves veil_events_backlog follows the journal during a NATS
// outage (when its alert matters) and falls back to 0 once everything is published.
func TestBacklogGrowsWhileNATSIsAway(t *testing.T) {
	for _, order := range []string{"oldest_first", "newest_first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: order, InitialTasks: -1}, "auto", "earliest")
			rec := subscribe(t, r.nats.URL())
			want := r.sim.AddEvents(20, veiltest.EventSpec{})
			fw, stop := r.run()
			t.Cleanup(stop)
			rec.waitFor(t, len(want), 10*time.Second)
			r.nats.Stop()
			testutil.Eventually(t, 10*time.Second, func() bool { return !r.conn.Connected() }, "the connection to notice NATS stopped")
			for _, wantBacklog := range []int{30, 55} {
				want = append(want, r.sim.AddEvents(wantBacklog-(len(want)-20), veiltest.EventSpec{})...)
				waitBacklog(t, fw, wantBacklog)
			}
			r.nats.Start()
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
			waitBacklog(t, fw, 0)
		})
	}
}

func waitBacklog(t *testing.T, fw *Forwarder, want int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Backlog == want }, "backlog %d", want)
}

// TestOutageLoggedOnStateChange proves a NATS outage (a failed cycle every second) gives one
// warning when it starts and one line when it ends, not one per retry.
func TestOutageLoggedOnStateChange(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	rec := subscribe(t, r.nats.URL())
	var logs logBuffer
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	want := r.sim.AddEvents(5, veiltest.EventSpec{})
	rec.waitFor(t, len(want), 10*time.Second)
	r.nats.Stop()
	want = append(want, r.sim.AddEvents(5, veiltest.EventSpec{})...)
	testutil.Eventually(t, 20*time.Second, func() bool {
		n, _, _ := fw.obs.outage.Failing()
		return n >= 3
	}, "three failed cycles")
	r.nats.Start()
	exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
	testutil.Eventually(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "event forwarding recovered") }, "the recovery logged")
	out := logs.String()
	failed := strings.Count(out, "event forwarding failed") + strings.Count(out, "event forwarding still failing")
	if failed != 1 || strings.Count(out, "event forwarding recovered") != 1 {
		t.Fatalf("want one failure line and one recovery line, got:\n%s", out)
	}
	if !strings.Contains(out, "not connected") {
		t.Errorf("the failure line does not say why:\n%s", out)
	}
}

// TestNATSDownAtStart proves that NATS unreachable at start costs nothing but waiting: Connect
// succeeds, the forwarder says why it is not ready (redacted URL and cause), veil_nats_connected
// is 0, one log line says NATS is unreachable and one that it connected, and the events created
// meanwhile are published exactly once when NATS comes, with either position store.
func TestNATSDownAtStart(t *testing.T) {
	for _, store := range []string{"file", "nats_kv"} {
		t.Run(store, func(t *testing.T) {
			r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
			r.nats.Stop()
			cfg := r.nc
			cfg.URL = strings.Replace(r.nats.URL(), "nats://", "nats://bob:s3cret@", 1)
			var logs logBuffer
			conn, err := natsconn.Connect(cfg, logs.logger())
			if err != nil {
				t.Fatalf("Connect with NATS down: %v", err)
			}
			t.Cleanup(conn.Close)
			ev := r.ev
			ev.Checkpoint.Store = store
			fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: ev, Stream: NewStream(conn, cfg, 1, nil), Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- fw.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			want := r.sim.AddEvents(30, veiltest.EventSpec{})
			hostPort := strings.TrimPrefix(r.nats.URL(), "nats://")
			testutil.Eventually(t, 10*time.Second, func() bool {
				why := fw.NotReady()
				return strings.Contains(why, "@"+hostPort) && !strings.Contains(why, "s3cret") && strings.Contains(why, "refused")
			}, "NotReady naming the URL and the cause")
			if gaugeValue(t, fw, "veil_nats_connected") != 0 {
				t.Error("veil_nats_connected is not 0 while NATS is down")
			}
			r.nats.Start()
			rec := subscribe(t, r.nats.URL())
			exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
			testutil.Eventually(t, 10*time.Second, func() bool { return fw.NotReady() == "" }, "ready once NATS is up")
			if gaugeValue(t, fw, "veil_nats_connected") != 1 {
				t.Error("veil_nats_connected is not 1 with NATS up")
			}
			out := logs.String()
			if n := strings.Count(out, "NATS unreachable"); n != 1 || !strings.Contains(out, "@"+hostPort) || strings.Contains(out, "s3cret") || !strings.Contains(out, "refused") {
				t.Errorf("want one line saying NATS is unreachable with the URL and cause, got %d:\n%s", n, out)
			}
			if n := strings.Count(out, "NATS connected"); n != 1 {
				t.Errorf("want one line saying NATS connected, got %d:\n%s", n, out)
			}
			if strings.Contains(out+fw.NotReady()+fw.Status().LastError, "s3cret") {
				t.Errorf("the password shows:\n%s", out)
			}
		})
	}
}

// gaugeValue is the value of the single series of name that c exports.
func gaugeValue(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue() + mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single series %s", name)
	return 0
}

// TestStreamSetUpAgainAfterReconnect: NATS coming back without the stream (a fresh server) gets
// it created again on the forwarder's next cycle, and new events land in it.
func TestStreamSetUpAgainAfterReconnect(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	r.sim.AddEvents(5, veiltest.EventSpec{})
	fw, stop := r.run()
	t.Cleanup(stop)
	testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published == 5 }, "5 events published")
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "VEIL_EVENTS"); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	r.nats.Stop()
	testutil.Eventually(t, 10*time.Second, func() bool { return !r.conn.Connected() }, "NATS seen gone")
	r.nats.Start()
	want := r.sim.AddEvents(3, veiltest.EventSpec{})
	nc, err = nats.Connect(r.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, err := js.Stream(ctx, "VEIL_EVENTS")
		return err == nil
	}, "the forwarder to create the stream again")
	rec := subscribe(t, r.nats.URL())
	exactlyOnceInOrder(t, "prod", want, rec.waitFor(t, len(want), 20*time.Second))
}
