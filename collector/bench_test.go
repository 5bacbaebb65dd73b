package collector

import (
	"context"
	"io"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

const (
	benchVMs, benchNodes, benchPools = 10000, 500, 50
	benchLatency                     = 20 * time.Millisecond
	benchConcurrency                 = 8
)

var benchSim struct {
	once sync.Once
	sim  *veiltest.Server
}

// largeInventory is shared by the benchmarks: building 10,000 VMs once is enough.
func largeInventory(b *testing.B) (*veiltest.Server, *Inventory) {
	b.Helper()
	benchSim.once.Do(func() {
		benchSim.sim = veiltest.New(veiltest.Options{Seed: 1, VMs: benchVMs, Nodes: benchNodes, Datapools: benchPools, Clusters: 5, Latency: benchLatency})
	})
	client, err := veil.New(veil.Config{URL: benchSim.sim.URL, Token: benchSim.sim.Token, MaxConcurrency: benchConcurrency, Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	cc := testCollect()
	inv, err := NewInventory("bench", client, cc, nil)
	if err != nil {
		b.Fatal(err)
	}
	return benchSim.sim, inv
}

// BenchmarkInventoryRefresh reports the refresh time against its floor: requests ÷
// max_concurrency × latency (target ratio ≤ 1.25).
func BenchmarkInventoryRefresh(b *testing.B) {
	sim, inv := largeInventory(b)
	ctx := context.Background()
	if err := inv.Refresh(ctx); err != nil { // prime the task watermark
		b.Fatal(err)
	}
	sim.ResetRequests()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if err := inv.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reqs := float64(len(sim.Requests())) / float64(b.N)
	floor := reqs / benchConcurrency * benchLatency.Seconds()
	per := elapsed.Seconds() / float64(b.N)
	b.ReportMetric(reqs, "requests/refresh")
	b.ReportMetric(floor, "floor-s")
	b.ReportMetric(per/floor, "ratio-to-floor")
	b.ReportMetric(float64(sim.InFlightMax()), "max-in-flight")
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}

// BenchmarkMetricsServe serves /metrics for the 10,000-VM snapshot (the exporter's path).
func BenchmarkMetricsServe(b *testing.B) {
	_, inv := largeInventory(b)
	if err := inv.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(inv)
	benchServe(b, reg)
}

// BenchmarkMetricsServeBaseline serves the same number of pre-built const metrics: the
// floor of what client_golang can encode.
func BenchmarkMetricsServeBaseline(b *testing.B) {
	_, inv := largeInventory(b)
	if err := inv.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 1024)
	var pre []prometheus.Metric
	done := make(chan struct{})
	go func() {
		for m := range ch {
			pre = append(pre, m)
		}
		close(done)
	}()
	inv.Collect(ch)
	close(ch)
	<-done
	reg := prometheus.NewRegistry()
	reg.MustRegister(prebuilt{descs: inv, metrics: pre})
	b.ReportMetric(float64(len(pre)), "series")
	benchServe(b, reg)
}

type prebuilt struct {
	descs   prometheus.Collector
	metrics []prometheus.Metric
}

func (p prebuilt) Describe(ch chan<- *prometheus.Desc) { p.descs.Describe(ch) }
func (p prebuilt) Collect(ch chan<- prometheus.Metric) {
	for _, m := range p.metrics {
		ch <- m
	}
}

func benchServe(b *testing.B, reg *prometheus.Registry) {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
		_, _ = io.Copy(io.Discard, w.Body)
	}
}
