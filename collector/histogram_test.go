package collector

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestTaskDurationBucketsMatchClientGolang: the task histogram, built at each scrape from the
// tracker's counts, has the classic buckets and the native buckets a live client_golang
// histogram with the same options would have for the same durations — including a zero
// duration and more distinct durations than nativeMaxBuckets (the resolution is halved).
func TestTaskDurationBucketsMatchClientGolang(t *testing.T) {
	wide := make([]float64, 0, 130)
	for i := range 130 {
		wide = append(wide, math.Exp2(float64(i)/8-4)*1.01) // one per schema-3 bucket, 1/16s..~1h
	}
	tests := []struct {
		name  string
		secs  []float64
		lower bool // the schema must end below nativeSchema
	}{
		{"a few durations", []float64{0, 0.4, 3, 3.05, 42, 42, 900, 5000}, false},
		{"more buckets than the limit", wide, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTaskTracker(maxTaskKinds, 0)
			want := prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "want", Help: "want", Buckets: taskDurationBuckets,
				NativeHistogramBucketFactor: nativeBucketFactor, NativeHistogramMaxBucketNumber: nativeMaxBuckets,
			})
			names := func(string) (string, bool) { return "", false }
			tr.mu.Lock()
			for _, s := range tt.secs {
				tr.count(&veil.Task{Name: "Backup.", Status: veil.TaskSuccess, Executed: veil.Number(s)}, names)
				want.Observe(s)
			}
			tr.mu.Unlock()
			var w dto.Metric
			if err := want.Write(&w); err != nil {
				t.Fatal(err)
			}
			_, durations := tr.values()
			if len(durations) != 1 {
				t.Fatalf("%d histograms, want 1", len(durations))
			}
			h := durations[0]
			desc := prometheus.NewDesc("veil_task_duration_seconds", "h", []string{"kind"}, nil)
			m, err := newBothHistogram(desc, h.count, h.sum, h.buckets, h.native, h.zero, h.created, h.name)
			if err != nil {
				t.Fatal(err)
			}
			var got dto.Metric
			if err := m.Write(&got); err != nil {
				t.Fatal(err)
			}
			g, e := got.GetHistogram(), w.GetHistogram()
			if g.GetSampleCount() != e.GetSampleCount() || g.GetSampleSum() != e.GetSampleSum() {
				t.Errorf("count/sum %d/%v, want %d/%v", g.GetSampleCount(), g.GetSampleSum(), e.GetSampleCount(), e.GetSampleSum())
			}
			if len(g.GetBucket()) != len(taskDurationBuckets) {
				t.Errorf("%d classic buckets, want %d", len(g.GetBucket()), len(taskDurationBuckets))
			}
			for i, b := range g.GetBucket() {
				if eb := e.GetBucket()[i]; b.GetUpperBound() != eb.GetUpperBound() || b.GetCumulativeCount() != eb.GetCumulativeCount() {
					t.Errorf("classic bucket %d: %v, want %v", i, b, e.GetBucket()[i])
				}
			}
			if g.GetSchema() != e.GetSchema() || g.GetZeroThreshold() != e.GetZeroThreshold() || g.GetZeroCount() != e.GetZeroCount() {
				t.Errorf("schema %d zero %v/%d, want %d %v/%d", g.GetSchema(), g.GetZeroThreshold(), g.GetZeroCount(),
					e.GetSchema(), e.GetZeroThreshold(), e.GetZeroCount())
			}
			if tt.lower != (g.GetSchema() < nativeSchema) {
				t.Errorf("schema %d with %d durations", g.GetSchema(), len(tt.secs))
			}
			if len(g.GetPositiveSpan()) == 0 || !equalSpans(g.GetPositiveSpan(), e.GetPositiveSpan()) ||
				!equalInts(g.GetPositiveDelta(), e.GetPositiveDelta()) {
				t.Errorf("native buckets\n got %v %v\nwant %v %v", g.GetPositiveSpan(), g.GetPositiveDelta(), e.GetPositiveSpan(), e.GetPositiveDelta())
			}
		})
	}
}

func equalSpans(a, b []*dto.BucketSpan) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetOffset() != b[i].GetOffset() || a[i].GetLength() != b[i].GetLength() {
			return false
		}
	}
	return true
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHistogramsHaveClassicAndNativeBuckets: gathered as protobuf (what Prometheus scrapes
// with native histograms on), both histograms of the exporter carry their classic buckets and
// native buckets; the text format keeps showing the classic buckets only.
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
			if h.Schema == nil || h.GetSchema() != nativeSchema || h.GetZeroThreshold() == 0 || len(h.GetPositiveSpan()) == 0 {
				t.Errorf("%s %v: no native buckets: schema %v spans %v", mf.GetName(), m.GetLabel(), h.Schema, h.GetPositiveSpan())
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
