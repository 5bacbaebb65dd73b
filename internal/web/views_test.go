package web

import (
	"testing"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

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
