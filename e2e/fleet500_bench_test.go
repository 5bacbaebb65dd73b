// The large fleet's figures for make bench-fleet: 500 controllers of 100 VMs (one bin/veil-sim
// process, a port each) on ten bin/veil-exporter replicas and a three-node NATS cluster, in one
// run: settle, kill -9 of a replica, a rolling restart of all ten, one NATS node killed and
// started again, the whole cluster down for 30 s, then every controller's events judged
// against the simulator's journal.

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// fleetRun is one large fleet run: its parts and the figures measured so far.
type fleetRun struct {
	b       *testing.B
	plan    fleetPlan
	cluster *testutil.Cluster
	js      jetstream.JetStream
	sim     *fleetSim
	names   []string
	reps    *fleetReplicas
	leases  *leaseWatch
	feed    *eventFeed
	arrive  *arrivalWatch
	fig     map[string]float64
	notes   []string
	soloAge time.Duration // how long the one exporter had run when its window closed
	settled time.Time     // when the replicas' holders last changed while settling
}

// BenchmarkFleet500 runs once whatever b.N (make bench-fleet asks for 1x); the metrics it
// reports are listed in fleetRun.report. A scenario that cannot run (its set-up timed out)
// is reported NOT MEASURED in the log and its metrics are absent.
func BenchmarkFleet500(b *testing.B) {
	r := newFleetRun(b)
	if r.plan.solo {
		r.solo()
	}
	if !r.settle() {
		r.report()
		b.Fatalf("the replicas did not settle: %s", strings.Join(r.notes, "; "))
	}
	r.arrive = watchArrivals(b, r.js)
	r.steadyWindow()
	r.killReplica()
	r.rollingRestart()
	r.natsNodeLoss()
	r.natsOutage()
	r.judge()
	r.report()
}

// newFleetRun starts the cluster, the simulator and the feed of events, and configures (does
// not start) the replicas.
func newFleetRun(b *testing.B) *fleetRun {
	r := &fleetRun{b: b, plan: fleetPlanFromEnv(b), fig: map[string]float64{}}
	r.cluster = testutil.StartCluster(b)
	dir := b.TempDir()
	exporter := testutil.Build(b, "cmd/veil-exporter")
	simBin := testutil.Build(b, "cmd/veil-sim")
	const token = "fleet-bench-token"
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	r.sim = startFleetSim(b, simBin, token, r.plan.controllers, r.plan.vms)
	r.sim.timeout = time.Minute // a simulator of 500 controllers on a loaded machine answers late
	r.names = make([]string, r.plan.controllers)
	var ctrls strings.Builder
	for i, u := range r.sim.urls {
		r.names[i] = fmt.Sprintf("c%03d", i)
		fmt.Fprintf(&ctrls, "  - name: %s\n    url: %s\n    token_file: %s\n", r.names[i], u, tok)
	}
	r.reps = &fleetReplicas{b: b, plan: r.plan, dir: dir, exporter: exporter, ctrls: ctrls.String(),
		nat: r.cluster.URLs(), gen: make([]int, r.plan.replicas), procs: make([]*replicaProc, r.plan.replicas)}
	r.js = r.cluster.JetStream(b)
	r.leases = watchLeases(b, r.js, r.plan.controllers)
	r.feed = r.sim.feed(b, r.names, 20, r.plan.feed)
	r.note("%d controllers x %d VMs, %d replicas, lease_ttl %v, collect.interval %v, events polled every %v, %d events/s fed",
		r.plan.controllers, r.plan.vms, r.plan.replicas, r.plan.ttl, r.plan.interval, r.plan.poll, int(float64(r.plan.controllers)/r.plan.feed.Seconds()))
	return r
}

// note prints a line of the run's account on stdout, where make bench-fleet keeps it (a
// benchmark's log shows only its first lines), and keeps it for a failure's message.
func (r *fleetRun) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Println("fleet: " + s)
	r.notes = append(r.notes, s)
}

// floor is the fewest controllers a replica holds once the assignment settled: the even share
// less one (the counts differ by at most one).
func (r *fleetRun) floor() int { return r.plan.controllers/r.plan.replicas - 1 }

// solo measures one exporter running every controller: the requests the controllers receive
// over a window, its CPU and memory. It stops it with SIGTERM (its leases go at once).
func (r *fleetRun) solo() {
	one := r.reps.proc("solo")
	start := time.Now()
	requests, cpu, rss, simCPU := fleetSolo(r.b, r.sim, r.leases, one, fleetWindow)
	r.soloAge = time.Since(start)
	r.fig["requests-one"], r.fig["cpu-one-cores"], r.fig["hwm-one-MiB"], r.fig["sim-one-cores"] = float64(requests.total), cpu, rss, simCPU
	r.note("one exporter running all %d: %d requests over %v, %.2f cores, VmHWM %.0f MiB, simulator %.2f cores", r.plan.controllers, requests.total, fleetWindow, cpu, rss, simCPU)
}

// settle starts every replica at once, as a Deployment's pods come up, and waits until no
// holder changed for two lease times: the spread, the time and the CPU of every process
// meanwhile.
func (r *fleetRun) settle() bool {
	pids := func() []int {
		out := append([]int{r.sim.pid}, natsPids(r.cluster)...)
		for _, p := range r.reps.running() {
			out = append(out, p.cmd.Process.Pid)
		}
		return out
	}
	start := time.Now()
	u0 := sampleCPU(r.b, pids()...)
	var wg sync.WaitGroup
	for slot := range r.plan.replicas {
		wg.Go(func() { r.reps.start(slot) })
	}
	wg.Wait()
	started := time.Since(start)
	u0 = sampleCPU(r.b, append(slices.Collect(maps.Keys(u0.cpu)), pids()...)...)
	limit := 4*time.Minute + time.Duration(r.plan.controllers)*r.plan.ttl/3
	ok, last := r.leases.waitStableFor(2*r.plan.ttl, limit, r.reps.insts(), r.floor())
	u1 := sampleCPU(r.b, pids()...)
	count, lo, hi, _, dev := fleetSpread(r.leases.counts(), r.reps.insts(), r.plan.controllers)
	r.note("replicas started in %v; settled %v (%v after the first start): %v", started.Round(100*time.Millisecond), ok, last.Sub(start).Round(100*time.Millisecond), count)
	if !ok {
		r.note("settle NOT MEASURED: no stable assignment within %v", limit)
		return false
	}
	r.fig["settle-s"] = last.Sub(start).Seconds()
	r.settled = last
	r.fig["spread-dev"], r.fig["spread-min"], r.fig["spread-max"] = float64(dev), float64(lo), float64(hi)
	var reps float64
	for _, p := range r.reps.running() {
		reps += u0.cores(u1, p.cmd.Process.Pid)
	}
	r.fig["settle-sim-cores"] = u0.cores(u1, r.sim.pid)
	r.fig["settle-nats-cores"] = u0.sum(u1, natsPids(r.cluster)...)
	r.fig["settle-replicas-cores"] = reps
	r.note("CPU while settling (%v): simulator %.2f cores, NATS %.2f, the replicas together %.2f",
		u1.at.Sub(u0.at).Round(time.Second), r.fig["settle-sim-cores"], r.fig["settle-nats-cores"], reps)
	return true
}

// steadyWindow measures the settled replicas over a window: the requests the controllers
// receive (to one exporter's), CPU and memory per controller per replica, the lease bucket's
// writes per second, and the CPU of NATS and the simulator.
//
// The window closes no sooner after the replicas settled than the one exporter's did after it
// started: a controller just started reads more (its first task scans look back, its events
// catch up), and a window of younger controllers measured that (1.08 once settling took 12 s).
func (r *fleetRun) steadyWindow() {
	if wait := time.Until(r.settled.Add(r.soloAge - fleetWindow)); wait > 0 {
		time.Sleep(wait) // the controllers' age, as the one exporter's
	}
	procs := r.reps.running()
	held := r.leases.counts()
	w0 := kvWrites(r.js)
	var all []int
	for _, p := range procs {
		all = append(all, p.cmd.Process.Pid)
	}
	u0 := sampleCPU(r.b, append(all, natsPids(r.cluster)...)...)
	requests, busiest, rss, simCPU := r.sim.window(r.b, fleetWindow, procs...)
	u1 := sampleCPU(r.b, append(all, natsPids(r.cluster)...)...)
	// The longest gap between two events of a controller when nothing happens: what the feed
	// and the polling alone leave, to read the pauses of the scenarios against.
	_, _, each := r.arrive.longestGap(r.names, u1.at.Add(-fleetWindow), u1.at)
	gaps := slices.Sorted(maps.Values(each))
	r.fig["quiet-gap-median-s"], r.fig["quiet-gap-max-s"] = gaps[len(gaps)/2].Seconds(), gaps[len(gaps)-1].Seconds()
	r.note("longest gap between two events of a controller in the quiet window: median %v, at most %v",
		gaps[len(gaps)/2].Round(100*time.Millisecond), gaps[len(gaps)-1].Round(100*time.Millisecond))
	w1 := kvWrites(r.js)
	var cpuPer, memPer, memMax float64
	for i, p := range procs {
		n := float64(max(held[r.reps.name(i)], 1))
		cpuPer = max(cpuPer, u0.cores(u1, p.cmd.Process.Pid)/n)
		mem := statusKB(r.b, p.cmd.Process.Pid, "VmRSS:") / 1024
		memPer, memMax = max(memPer, mem/n), max(memMax, mem)
	}
	el := u1.at.Sub(u0.at).Seconds()
	r.fig["requests-replicas"] = float64(requests.total)
	if one := r.fig["requests-one"]; one > 0 {
		r.fig["requests-ratio"] = float64(requests.total) / one
	}
	r.fig["cpu-replica-cores"], r.fig["hwm-replica-MiB"], r.fig["sim-cpu-cores"] = busiest, rss, simCPU
	r.fig["cpu-per-controller-mcores"] = 1000 * cpuPer
	r.fig["rss-per-controller-MiB"] = memPer
	r.fig["nats-cores"] = u0.sum(u1, natsPids(r.cluster)...)
	r.fig["lease-writes-per-s"] = float64(w1-w0) / el
	r.note("replicas over %v: %d requests (one exporter %.0f), busiest replica %.2f cores, %.2f millicores and %.1f MiB per controller at most (largest VmRSS %.0f MiB), NATS %.2f cores, simulator %.2f, lease bucket %.0f writes/s",
		fleetWindow, requests.total, r.fig["requests-one"], busiest, 1000*cpuPer, memPer, memMax, r.fig["nats-cores"], simCPU, r.fig["lease-writes-per-s"])
}

// killReplica kills -9 the holder of the first controller: the time until every one of its
// controllers is held by a survivor, the healthy controllers that moved meanwhile and for two
// lease times more; then the pod comes back (a new one) and takes its share.
func (r *fleetRun) killReplica() {
	before := r.leases.owners()
	victim := before[r.names[0]]
	slot := r.reps.bySlot(victim)
	var survivors []string
	for _, inst := range r.reps.insts() {
		if inst != victim {
			survivors = append(survivors, inst)
		}
	}
	mine := 0
	for _, o := range before {
		if o == victim {
			mine++
		}
	}
	killed := time.Now()
	r.reps.procs[slot].signal(syscall.SIGKILL)
	r.reps.procs[slot].wait()
	bound := r.plan.ttl + 30*time.Second
	for time.Since(killed) < bound && !r.heldBy(survivors) {
		time.Sleep(20 * time.Millisecond) // the lease watch has no notification of its own
	}
	took := time.Since(killed)
	if !r.heldBy(survivors) {
		r.note("kill -9 NOT MEASURED: %s's controllers not all taken over within %v", victim, bound)
		return
	}
	r.leases.waitStableFor(2*r.plan.ttl, 2*time.Minute, survivors, 0)
	healthy := r.leases.movedSince(killed, func(ct string) bool { return before[ct] != victim })
	for _, h := range r.leases.history(killed, healthy) {
		r.b.Logf("kill -9 of %s: healthy %s", victim, h)
	}
	r.fig["takeover-s"], r.fig["takeover-of"], r.fig["healthy-moved"] = took.Seconds(), float64(mine), float64(len(healthy))
	r.note("kill -9 of %s: its %d controllers held by survivors after %v (bound %v), %d healthy moved", victim, mine, took.Round(10*time.Millisecond), r.plan.ttl+2*time.Second, len(healthy))
	back := time.Now()
	r.reps.start(slot)
	ok, last := r.leases.waitStableFor(r.plan.ttl, 3*time.Minute, r.reps.insts(), r.floor())
	r.note("a new pod %s in slot %d: settled %v, %v after it started: %v", r.reps.name(slot), slot, ok, last.Sub(back).Round(100*time.Millisecond), r.leases.counts())
	if ok {
		r.fig["rejoin-s"] = last.Sub(back).Seconds()
	}
}

// heldBy says whether every controller is held by one of insts.
func (r *fleetRun) heldBy(insts []string) bool {
	o := r.leases.owners()
	for _, n := range r.names {
		if !slices.Contains(insts, o[n]) {
			return false
		}
	}
	return true
}
