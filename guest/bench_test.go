package guest

import (
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"

	"github.com/veil-exporter/veil-exporter/veil"
)

// BenchmarkGuestPingSweep measures one full guest-ping sweep over many running VMs with agents
// against the simulator (20ms latency) under a client budget of 1,000 requests/s, with network
// counters and the statistics of the guests offering them read every minute (the defaults), as a
// ratio to the floor (target <= 1.1). The floor is the sweep the budget allows once the periodic
// reads have taken their share: VMs ÷ (budget − VMs ÷ network_interval − statistics commands
// offered ÷ stats_interval − VMs ÷ each hourly interval of osinfo, fsinfo, time).
// The ping interval is shorter than the floor, so the sweep runs as fast as the budget allows.
// VEIL_BENCH_GUEST_VMS sets the number of VMs (default 2000; the figure is for 10000).
//
// The sweeps measured are the three after the first, which also asks every VM what it offers
// and who it is. (The budget was 500 requests/s until make bench had to fit in 15 minutes: the
// ratio is the same at either, the checker and the simulator use a third of a core at 500.)
func BenchmarkGuestPingSweep(b *testing.B) {
	vms := 2000
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_GUEST_VMS")); err == nil && v > 0 {
		vms = v
	}
	const budget = 1000.0
	o := guestSimOptions(vms)
	o.Latency = 20 * time.Millisecond
	cfg := guestTestConfig()
	cfg.PingInterval = time.Second
	cfg.OSInfoInterval, cfg.FSInfoInterval, cfg.TimeInterval = time.Hour, time.Hour, time.Hour
	cfg.NetworkInterval, cfg.StatsInterval = time.Minute, time.Minute
	cfg.CommandTimeout = 5 * time.Second
	cfg.Concurrency = 48 // 1000/s × 20ms needs 20 in flight; room for jitter
	e := newGuestEnv(b, guestEnvOpts{sim: o, cfg: cfg, rate: budget, concurrency: 48})
	n := len(e.eligibleIDs())
	// The floor is the sweep's requests at the budget: the pings, and whatever periodic reads
	// (network counters, statistics) the checker made while it swept, all counted from the
	// simulator's log. A sweep can be no faster; at 1.0 the checker spends the whole budget.
	e.waitSweeps(1, 10*time.Minute) // the first sweep meets every guest for the first time
	e.sim.ResetRequests()
	b.ResetTimer()
	// Several sweeps of one checker (make bench asks for 1x: each run sets up 10,000 guests and
	// sweeps them once unmeasured, which took longer than the sweeps measured).
	var durs, ratios, perVM []float64
	for range b.N * benchSweeps {
		e.waitSweeps(1, 10*time.Minute)
		st := e.gc.Status()
		end := st.LastSweep
		start := end.Add(-st.SweepDuration)
		reqs := 0
		for _, r := range e.sim.Requests() {
			if !r.Start.Before(start) && r.Start.Before(end) {
				reqs++
			}
		}
		floor := float64(reqs) / budget
		durs = append(durs, st.SweepDuration.Seconds())
		ratios = append(ratios, st.SweepDuration.Seconds()/floor)
		perVM = append(perVM, float64(reqs)/float64(n))
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "vms")
	b.ReportMetric(medianOf(durs), "sweep-s")
	b.ReportMetric(medianOf(perVM), "requests/vm")
	b.ReportMetric(medianOf(ratios), "ratio-to-floor")
	b.ReportMetric(slices.Max(ratios), "worst-ratio-to-floor")
	b.ReportMetric(float64(len(durs)), "sweeps")
}

// benchSweeps is how many consecutive sweeps BenchmarkGuestPingSweep measures per iteration:
// one (the three of a run differed by 0.3%, the two of later runs by less; each is 25 s of a
// make bench whose time has a goal, after the unmeasured first sweep of 40 s).
const benchSweeps = 1

// medianOf is the median of v (not empty).
func medianOf(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fixedDomains is a DomainSource that never changes.
type fixedDomains []*veil.Domain

func (f fixedDomains) DomainsGen() ([]*veil.Domain, uint64) { return f, 1 }

// BenchmarkGuestRender renders the guest series of VEIL_BENCH_GUEST_VMS checked guests (default
// 2000; each with its OS, two filesystems, one interface and its clock, and two in three with the
// statistics of newer agents: one disk, CPU time in eight modes, load) with every family
// compressed anew: the CPU one render costs, paid at most every guest.ping_interval/10; in the
// text format only (formats=text), and with the OpenMetrics and protobuf forms made too, as
// while scrapers ask for them (formats=all).
func BenchmarkGuestRender(b *testing.B) {
	b.Run("formats=text", func(b *testing.B) { benchGuestRender(b, false) })
	b.Run("formats=all", func(b *testing.B) { benchGuestRender(b, true) })
}

func benchGuestRender(b *testing.B, all bool) {
	vms := 2000
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_GUEST_VMS")); err == nil && v > 0 {
		vms = v
	}
	doms := make(fixedDomains, vms)
	for i := range doms {
		doms[i] = &veil.Domain{ID: fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i*7919, i), UserPowerState: veil.PowerOn}
		doms[i].GuestUtils.QemuState = true
	}
	r := exposition.NewRenderer()
	g := NewChecker("bench", &veil.Client{}, guestTestConfig(), doms, Outputs{Renderer: r})
	g.sync(time.Now())
	i := 0
	for _, v := range g.vms {
		i++
		if i%3 != 0 {
			v.disks = []guestDisk{{name: "vda", counters: [diskCounters]float64{3.1e10, 8.7e10, 1.2e6, 4.5e6, 812.5, 2301.25, 1603.5}, has: 1<<diskCounters - 1}}
			v.cpu = &guestCPU{seconds: [len(cpuModes)]float64{9.1e6, 1.2e4, 310.5, 52.1, 1.8e3, 420.7, 6.6e4, 2.4e5}, has: 1<<len(cpuModes) - 1}
			v.load = &guestLoad{avg: [3]float64{0.52, 0.61, 0.58}, has: 7}
		}
		v.pinged, v.pingOK, v.pingDur = true, true, 0.0012345
		v.os = &veil.GuestOSInfo{ID: "ubuntu", Name: "Ubuntu", Version: "24.04 LTS (Noble Numbat)", KernelRelease: "6.8.0-45-generic", Machine: "x86_64", PrettyName: "Ubuntu 24.04.1 LTS"}
		v.fs = []guestFS{{"/", "ext4", "vda1", 2.1e10, 8.2e9}, {"/boot", "ext4", "vda2", 1.0e9, 2.5e8}}
		v.nics = []guestNIC{{name: "eth0", counters: [nicCounters]float64{1.2e9, 3.4e6, 0, 12, 9.8e8, 2.2e6, 0, 0}}}
		v.hasClock, v.clock = true, -0.000123
	}
	if all { // a scrape in each format: the renderer then makes both at each render
		h := exposition.Handler(exposition.HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*exposition.Set { return []*exposition.Set{g.Rendered()} }, Renderer: r})
		for _, accept := range []string{"application/openmetrics-text;version=1.0.0", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"} {
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.Header.Set("Accept", accept)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	b.ReportAllocs()
	var set *exposition.Set
	for b.Loop() {
		// A render without a previous Set: every family compressed (and made in the formats
		// scrapers asked for).
		set = exposition.NewCache(r, exposition.Pace{}, g.render, nil).Set()
	}
	plain, gz := expotest.SetSize(b, set)
	b.ReportMetric(float64(plain)/(1<<20), "rendered-MiB")
	b.ReportMetric(float64(gz)/(1<<20), "rendered-gzip-MiB")
	b.ReportMetric(float64(vms), "vms")
}
