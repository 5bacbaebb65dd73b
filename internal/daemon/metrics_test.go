package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
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

// TestCollectorViewStates: the page's state of a run: ok, failing, or unavailable (neutral).
func TestCollectorViewStates(t *testing.T) {
	for _, tt := range []struct {
		in   runstatus.Status
		want string
	}{
		{runstatus.Status{Collector: "nodes", Success: true}, "ok"},
		{runstatus.Status{Collector: "tasks", Error: "timeout"}, "failing"},
		{runstatus.Status{Collector: "datapools", Unavailable: true, Error: "404"}, "unavailable"},
	} {
		if got := collectorView(tt.in); got.State != tt.want || got.Collector != tt.in.Collector || got.Error != tt.in.Error {
			t.Errorf("collectorView(%+v) = %+v, want state %s", tt.in, got, tt.want)
		}
	}
}

// TestReportersOfController: each part reports, and only the parts that are on: the inventory
// alone for a controller with guest checks and events off.
func TestReportersOfController(t *testing.T) {
	ct := &controller{parts: []component{inventoryPart{}}} // guest checks and events off
	if rs := reporters(ct); len(rs) != 1 {
		t.Errorf("%d reporters of a controller with only an inventory", len(rs))
	}
}
