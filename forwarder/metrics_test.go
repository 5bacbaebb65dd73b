package forwarder

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestPublishedTypeLabelIsBounded proves veil_events_published_total keeps its type label to
// info, warning, error and other whatever the API sends, while the subject keeps the raw type,
// and that every HELP text says when its value changes.
func TestPublishedTypeLabelIsBounded(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	for _, typ := range []string{"info", "error", "warning", "audit", "INFO", "x.y"} {
		r.sim.AddEvents(2, veiltest.EventSpec{Type: typ, EntityClass: "domain", Message: "m"})
	}
	fw, stop := r.run()
	t.Cleanup(stop)
	testutil.Eventually(t, 10*time.Second, func() bool { return fw.Status().Published >= 12 }, "12 events published")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(fw); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		name, help := mf.GetName(), mf.GetHelp()
		switch {
		case strings.HasPrefix(name, "veil_events_") && !strings.Contains(help, "every events.poll_interval"):
			t.Errorf("%s HELP does not say it is updated every poll_interval: %q", name, help)
		case name == "veil_nats_connected" && !strings.Contains(help, "scrape time"):
			t.Errorf("%s HELP does not say when it is read: %q", name, help)
		}
		if name != "veil_events_published_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	want := map[string]float64{"info": 2, "error": 2, "warning": 2, "other": 6}
	if len(got) != len(want) {
		t.Errorf("type labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("veil_events_published_total{type=%q} = %v, want %v", k, got[k], v)
		}
	}
	subjects := map[string]bool{}
	for _, e := range fw.Status().Recent {
		subjects[e.Subject] = true
	}
	for _, s := range []string{"veil.events.prod.audit.domain", "veil.events.prod.INFO.domain", "veil.events.prod.x_y.domain"} {
		if !subjects[s] {
			t.Errorf("no event on subject %s; subjects %v", s, subjects)
		}
	}
}
