package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestHistogramsHaveClassicAndNativeBuckets: gathered as protobuf (what Prometheus scrapes
// with native histograms on), both histograms of the exporter carry their classic buckets,
// native buckets and start timestamp; the text format keeps showing the classic buckets only.
func TestHistogramsHaveClassicAndNativeBuckets(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 3, VMs: 5, TaskDuration: 10 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	startAndWait(t, f, f.sim.DomainIDs()[0])
	f.mustRefresh(t)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.inv, f.api)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	classic := map[string]int{"veil_api_request_duration_seconds": 12, "veil_task_duration_seconds": len(taskDurationBuckets)}
	seen := map[string]bool{}
	for _, mf := range mfs {
		n, ok := classic[mf.GetName()]
		if !ok {
			continue
		}
		seen[mf.GetName()] = true
		if len(mf.GetMetric()) == 0 {
			t.Errorf("%s has no series", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if len(h.GetBucket()) != n {
				t.Errorf("%s %v: %d classic buckets, want %d", mf.GetName(), m.GetLabel(), len(h.GetBucket()), n)
			}
			// Schema 3 is what client_golang picks for nativeBucketFactor 1.1.
			if h.Schema == nil || h.GetSchema() != 3 || h.GetZeroThreshold() == 0 || len(h.GetPositiveSpan()) == 0 {
				t.Errorf("%s %v: no native buckets: schema %v spans %v", mf.GetName(), m.GetLabel(), h.Schema, h.GetPositiveSpan())
			}
			if h.GetCreatedTimestamp() == nil {
				t.Errorf("%s %v: no start (created) timestamp", mf.GetName(), m.GetLabel())
			}
			var native uint64 = h.GetZeroCount()
			var c int64
			for _, d := range h.GetPositiveDelta() {
				c += d
				native += uint64(c)
			}
			if native != h.GetSampleCount() {
				t.Errorf("%s %v: native buckets hold %d observations, count %d", mf.GetName(), m.GetLabel(), native, h.GetSampleCount())
			}
		}
	}
	for name := range classic {
		if !seen[name] {
			t.Errorf("%s not gathered", name)
		}
	}
	for _, s := range series(t, f.inv, "veil_task_duration_seconds") {
		if !strings.Contains(s, "_bucket{") && !strings.Contains(s, "_sum{") && !strings.Contains(s, "_count{") {
			t.Errorf("text exposition line beyond the classic histogram: %s", s)
		}
	}
}
