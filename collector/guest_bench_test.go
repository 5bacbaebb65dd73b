package collector

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkGuestPingSweep measures one full guest-ping sweep over many running VMs with agents
// against the simulator (20ms latency) under a client budget of 500 requests/s, with network
// counters read every minute (the default), as a ratio to the floor (target <= 1.1). The floor
// is the sweep the budget allows once the network reads have taken their share:
// VMs ÷ (budget − VMs ÷ network_interval). The ping interval is shorter than the floor, so the
// sweep runs as fast as the budget allows. VEIL_BENCH_GUEST_VMS sets the number of VMs
// (default 2000; the figure is for 10000).
func BenchmarkGuestPingSweep(b *testing.B) {
	vms := 2000
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_GUEST_VMS")); err == nil && v > 0 {
		vms = v
	}
	const budget = 500.0
	o := guestSimOptions(vms)
	o.Latency = 20 * time.Millisecond
	cfg := guestTestConfig()
	cfg.PingInterval = time.Second
	cfg.OSInfoInterval, cfg.FSInfoInterval, cfg.TimeInterval = time.Hour, time.Hour, time.Hour
	cfg.NetworkInterval = time.Minute
	cfg.CommandTimeout = 5 * time.Second
	cfg.Concurrency = 32 // 500/s × 20ms needs 10 in flight; room for jitter
	e := newGuestEnv(b, guestEnvOpts{sim: o, cfg: cfg, rate: budget, concurrency: 32})
	n := len(e.eligibleIDs())
	netRate := float64(n) / cfg.NetworkInterval.Seconds()
	floor := time.Duration(float64(n) / (budget - netRate) * float64(time.Second))
	timeout := 10*floor + 30*time.Second
	// The first sweep also asks available-guest-cmds and osinfo of every VM: not measured.
	e.waitSweeps(1, timeout)
	b.ResetTimer()
	var sweep time.Duration
	for range b.N {
		e.waitSweeps(1, timeout)
		sweep = e.gc.Status().SweepDuration
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "vms")
	b.ReportMetric(sweep.Seconds(), "sweep-s")
	b.ReportMetric(sweep.Seconds()/floor.Seconds(), "ratio-to-floor")
}
