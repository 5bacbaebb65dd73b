package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/internal/web"
)

// fakeReporter is a component that reports fixed runs.
type fakeReporter []runstatus.Status

func (f fakeReporter) RunStatus() []runstatus.Status { return f }

// TestRunStatusCollector: one collector emits the three veil_collector_* families for every
// reporter of every controller; a collection the controller lacks is success 0, like a failure,
// and a collector that never succeeded has last success 0.
func TestRunStatusCollector(t *testing.T) {
	last := time.Unix(1700000000, 500_000_000)
	runs := []controllerRuns{
		{controller: "prod", reporters: []runstatus.Reporter{
			fakeReporter{
				{Collector: "nodes", Success: true, Duration: 250 * time.Millisecond, LastSuccess: last},
				{Collector: "datapools", Unavailable: true, Duration: 10 * time.Millisecond, Error: "404"},
			},
			fakeReporter{{Collector: "guest", Duration: 2 * time.Second, LastSuccess: last, Error: "timeout"}},
		}},
		{controller: "lab", reporters: []runstatus.Reporter{fakeReporter{{Collector: "events", Success: true, Duration: time.Second, LastSuccess: last}}}},
	}
	c := newRunStatusCollector(func() []controllerRuns { return runs })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP veil_collector_success 1 if the last background run of the collector succeeded (inventory collections every collect.interval, guest sweeps, event polls); a scrape reads the cached result and never runs a collector.
# TYPE veil_collector_success gauge
veil_collector_success{collector="datapools",controller="prod"} 0
veil_collector_success{collector="events",controller="lab"} 1
veil_collector_success{collector="guest",controller="prod"} 0
veil_collector_success{collector="nodes",controller="prod"} 1
# HELP veil_collector_duration_seconds Duration of the last background run of the collector; cached, a scrape never runs a collector.
# TYPE veil_collector_duration_seconds gauge
veil_collector_duration_seconds{collector="datapools",controller="prod"} 0.01
veil_collector_duration_seconds{collector="events",controller="lab"} 1
veil_collector_duration_seconds{collector="guest",controller="prod"} 2
veil_collector_duration_seconds{collector="nodes",controller="prod"} 0.25
# HELP veil_collector_last_success_timestamp_seconds Unix time of the last successful background run of the collector, so time() minus it is the age of the cached data; 0 if it never succeeded.
# TYPE veil_collector_last_success_timestamp_seconds gauge
veil_collector_last_success_timestamp_seconds{collector="datapools",controller="prod"} 0
veil_collector_last_success_timestamp_seconds{collector="events",controller="lab"} 1.7000000005e+09
veil_collector_last_success_timestamp_seconds{collector="guest",controller="prod"} 1.7000000005e+09
veil_collector_last_success_timestamp_seconds{collector="nodes",controller="prod"} 1.7000000005e+09
`
	if err := promtestutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	runs = nil
	if n, err := promtestutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("no controller: %d series, %v", n, err)
	}
}

// TestComponentCapabilities: add finds each component's capabilities once: rendered series
// (inventory, guest checks), a part of the status page (all), problems (inventory, guest
// checks), liveness and readiness (inventory, events), service discovery's targets (inventory)
// and guest details (guest checks).
func TestComponentCapabilities(t *testing.T) {
	var ps parts
	inv, guest := &inventoryPart{}, guestPart{}
	for _, c := range []component{inv, pushPart{}, kvPart{}, guest, eventsPart{}} {
		ps.add(c)
	}
	for _, tt := range []struct {
		what      string
		got, want int
	}{
		{"components", len(ps.all), 5},
		{"rendered", len(ps.rendered), 2},
		{"viewers", len(ps.viewers), 5},
		{"problem sources", len(ps.problems), 2},
		{"liveness", len(ps.liveness), 2},
		{"readiness", len(ps.readiness), 2},
	} {
		if tt.got != tt.want {
			t.Errorf("%d %s, want %d", tt.got, tt.what, tt.want)
		}
	}
	if ps.targets != web.TargetSource(inv) || ps.guests != web.GuestSource(guest) {
		t.Errorf("service discovery reads targets %T and guests %T, want the inventory and the guest checks", ps.targets, ps.guests)
	}
	var alone parts
	alone.add(&inventoryPart{})
	if rs := reporters(&controller{parts: alone}); len(rs) != 1 || alone.guests != nil {
		t.Errorf("a controller with only an inventory: %d reporters, guests %v", len(rs), alone.guests)
	}
}
