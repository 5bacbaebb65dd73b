package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// The benchmark inventory: 10,000 VMs by default (VEIL_BENCH_VMS changes the VM count, for
// the growth figures), 500 nodes, 50 datapools, 20 ms per request, 8 requests in flight.
//
// With VEIL_BENCH_URL (and VEIL_BENCH_TOKEN) the benchmarks read an external simulator
// instead, e.g. `veil-sim --vms 10000 --nodes 500 --datapools 50 --clusters 5 --latency 20ms`
// as scripts/bench.sh starts it: then the process measured is the exporter alone, as in
// production, and its CPU time per refresh is its own. VEIL_BENCH_SIM_PID (Linux) adds the
// simulator's CPU time per refresh, to show how much of the shared cores it took.
const (
	benchNodes, benchPools = 500, 50
	benchLatency           = 20 * time.Millisecond
	benchConcurrency       = 8
)

func benchVMs() int {
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_VMS")); err == nil && v > 0 {
		return v
	}
	return 10000
}

var benchSim struct {
	once sync.Once
	sim  *veiltest.Server
}

// benchTarget returns the URL and token of the simulator to read: the external one, or one
// built once per process (building 10,000 VMs once is enough).
func benchTarget() (url, token string) {
	if u := os.Getenv("VEIL_BENCH_URL"); u != "" {
		token = os.Getenv("VEIL_BENCH_TOKEN")
		if token == "" {
			token = "sim-token"
		}
		return u, token
	}
	benchSim.once.Do(func() {
		benchSim.sim = veiltest.New(veiltest.Options{Seed: 1, VMs: benchVMs(), Nodes: benchNodes, Datapools: benchPools, Clusters: 5, Latency: benchLatency})
	})
	return benchSim.sim.URL, benchSim.sim.Token
}

// largeInventory returns an inventory of the benchmark simulator whose client counts the
// requests it sends.
func largeInventory(b *testing.B) (testInventory, *atomic.Int64) {
	b.Helper()
	url, token := benchTarget()
	var sent atomic.Int64
	client, err := veil.New(veil.Config{
		URL: url, Token: token, MaxConcurrency: benchConcurrency, Timeout: 30 * time.Second,
		Observer: func(string, int, time.Duration) { sent.Add(1) },
	})
	if err != nil {
		b.Fatal(err)
	}
	inv, err := newTestInventory(client, testCollect(), nil)
	if err != nil {
		b.Fatal(err)
	}
	return inv, &sent
}

// BenchmarkInventoryRefresh reports the refresh time against its floor: requests ÷
// max_concurrency × the simulator's measured answer time (ratio-to-answer-floor, target ≤ 1.25;
// ratio-to-floor takes the nominal latency instead), and the CPU time one refresh costs.
func BenchmarkInventoryRefresh(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		inv, sent := largeInventory(b)
		ctx := context.Background()
		if err := inv.Refresh(ctx); err != nil { // prime the task watermark and the connections
			b.Fatal(err)
		}
		if got := inv.Status().DomainsTotal; got != benchVMs() {
			b.Fatalf("inventory has %d VMs, want %d", got, benchVMs())
		}
		simPID, _ := strconv.Atoi(os.Getenv("VEIL_BENCH_SIM_PID"))
		// Rendering runs beside the refreshes, as Run has it (its CPU is in cpu-s/refresh). The
		// first render, of the primed snapshot, is the start's and not a refresh's: it is
		// waited for, as families a refresh leaves unchanged are kept from the render before.
		rctx, stopRender := context.WithCancel(ctx)
		defer stopRender()
		firstRender := make(chan struct{}, 1)
		inv.Inventory.renderHook = func(uint64) {
			select {
			case firstRender <- struct{}{}:
			default:
			}
		}
		go inv.Inventory.Run(rctx)
		<-firstRender
		sent.Store(0)
		cpu0, sim0 := processCPU(), procCPU(simPID)
		b.ReportAllocs() // per refresh, its render included
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			if err := inv.Refresh(ctx); err != nil {
				b.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		n := float64(b.N)
		reqs := float64(sent.Load()) / n
		floor := reqs / benchConcurrency * benchLatency.Seconds()
		per := elapsed.Seconds() / n
		b.ReportMetric(reqs, "requests/refresh")
		b.ReportMetric(floor, "floor-s")
		b.ReportMetric(per, "refresh-s")
		b.ReportMetric(per/floor, "ratio-to-floor")
		// The same floor with the time the simulator took to answer (latency, its timer's
		// overshoot, its own work) instead of the nominal latency: the floor judged.
		if busy := simBusy(b, start); busy > 0 {
			b.ReportMetric(per/(busy.Seconds()/n/benchConcurrency), "ratio-to-answer-floor")
		}
		b.ReportMetric((processCPU()-cpu0).Seconds()/n, "cpu-s/refresh")
		if simPID > 0 {
			b.ReportMetric((procCPU(simPID)-sim0).Seconds()/n, "sim-cpu-s/refresh")
		}
		// What rendering the gauges (text, sorted, compressed) costs a refresh, every family
		// compressed anew (a refresh keeps the families whose bytes did not change).
		t0 := time.Now()
		var set *exposition.Set
		for range 3 {
			set = inv.renderFresh()
		}
		b.ReportMetric(time.Since(t0).Seconds()/3, "render-s")
		plain, gz := expotest.SetSize(b, set)
		b.ReportMetric(float64(plain)/(1<<20), "rendered-MiB")
		b.ReportMetric(float64(gz)/(1<<20), "rendered-gzip-MiB")
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	})
}

// simBusy is the time the benchmark simulator spent answering API requests that started since
// start, from its request log (0 when it cannot be read).
func simBusy(b *testing.B, since time.Time) time.Duration {
	b.Helper()
	url, _ := benchTarget()
	resp, err := http.Get(url + "/_sim/requests")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var reqs []veiltest.Request
	if json.NewDecoder(resp.Body).Decode(&reqs) != nil {
		return 0
	}
	var busy time.Duration
	for _, r := range reqs {
		if !r.Start.Before(since) {
			busy += r.Duration
		}
	}
	return busy
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user+system CPU time of another process, read from /proc (0 if unknown).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which may contain spaces: state is field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clockTicks
}

// BenchmarkMetricsServe serves /metrics for the inventory snapshot (the exporter's path).
func BenchmarkMetricsServe(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		inv, _ := largeInventory(b)
		if err := inv.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(inv.Inventory)
		benchServe(b, reg)
	})
}

// BenchmarkMetricsServeBaseline serves the same number of pre-built const metrics: the
// floor of what client_golang can encode.
func BenchmarkMetricsServeBaseline(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		inv, _ := largeInventory(b)
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
		inv.Inventory.Collect(ch)
		close(ch)
		<-done
		reg := prometheus.NewRegistry()
		reg.MustRegister(prebuilt{descs: inv.Inventory, metrics: pre})
		benchServe(b, reg)
	})
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

// benchServe serves /metrics from reg and reports the series count and the bytes per scrape.
func benchServe(b *testing.B, reg *prometheus.Registry) {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	var size int
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
		size = w.Body.Len()
		_, _ = io.Copy(io.Discard, w.Body)
	}
	b.StopTimer()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	series := 0
	for _, mf := range mfs {
		series += len(mf.GetMetric())
	}
	b.ReportMetric(float64(series), "series")
	b.ReportMetric(float64(size), "bytes/scrape")
}

// renderFresh renders the latest snapshot without a previous Set: every family is compressed.
func (v *Inventory) renderFresh() *exposition.Set {
	return exposition.NewCache(nil, exposition.Pace{}, func(s exposition.Sink) { v.fams.emit(s, v.store.Snapshot(), nil) }, nil).Set()
}
