package guest

// Guest checker tests: the request budget, concurrency, and the spread of checks over time.

import (
	"bytes"
	"container/heap"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestGuestCheckerStaysWithinBudget: demand (25 VMs pinged every 200ms) far above the budget
// of 50 requests/s. Arrival times in the simulator's log (Request.Start is taken when the
// request reaches the handler) must show
//   - from the start, never more than the limiter allows: 1 + budget × elapsed (burst 1); a
//     late sender only delays requests, so this holds exactly whatever the scheduling;
//   - in every one-second window at most budget +5% (the criterion) — unless the process
//     itself stalled: the limiter schedules permits 1/budget apart, but a goroutine waiting for
//     one wakes late when the process is not run, and every permit that fell due during a
//     stall S goes out together when it ends (seen in the log as gaps like "73 0 0" ms). The
//     window bound is then 1 + budget × (1s + S), S the longest stall a watchdog saw end
//     inside that window;
//   - at most cfg.Concurrency requests in flight, never two calls to one VM at once, and
//     sweeps that stretch instead of piling up.
func TestGuestCheckerStaysWithinBudget(t *testing.T) {
	const budget = 50.0
	o := guestSimOptions(25)
	o.Latency = 20 * time.Millisecond
	cfg := guestTestConfig()
	cfg.Concurrency = 4
	watch := startStallWatch()
	t0 := time.Now() // before the client exists: no permit of the budget precedes it
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg, rate: budget, concurrency: 8})
	n := len(e.eligibleIDs())
	e.waitSweeps(3, 10*time.Second) // the first sweep, and two more under the budget observed
	reqs := e.sim.Requests()
	watch.Stop()
	if len(reqs) < int(budget) {
		t.Fatalf("only %d requests logged", len(reqs))
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Start.Before(reqs[j].Start) })
	perReq := time.Duration(float64(time.Second) / budget)
	for k, r := range reqs {
		// The k-th request (0-based) cannot have had its permit before t0 + k/budget.
		if early := t0.Add(time.Duration(k) * perReq).Sub(r.Start); early > time.Millisecond {
			t.Errorf("request %d arrived %s after the start, %s before the budget allowed it", k+1, r.Start.Sub(t0), early)
			break
		}
	}
	worst, j, failed := 0, 0, false
	var stalled time.Duration // longest stall ending in a window over budget +5%
	for i := range reqs {
		for reqs[i].Start.Sub(reqs[j].Start) >= time.Second {
			j++
		}
		count := i - j + 1
		worst = max(worst, count)
		if float64(count) <= budget*1.05 || failed {
			continue
		}
		// A stall that ended just before the window still delivers its late requests into it:
		// the handlers run a little after the watchdog does, and the requests in flight (at most
		// Concurrency, sent on time) reach them together.
		s := watch.longest(reqs[j].Start.Add(-100*time.Millisecond), reqs[i].Start)
		stalled = max(stalled, s)
		if limit := float64(cfg.Concurrency) + budget*(time.Second+s).Seconds(); float64(count) > limit {
			failed = true
			var gaps []int64
			for k := j + 1; k <= i; k++ {
				gaps = append(gaps, reqs[k].Start.Sub(reqs[k-1].Start).Milliseconds())
			}
			t.Errorf("one-second window from %s has %d requests, budget %v: over +5%% and over concurrency + budget × (1s + stall %s) = %.1f; gaps in ms %v",
				reqs[j].Start.Sub(t0), count, budget, s, limit, gaps)
		}
	}
	t.Logf("%d requests; busiest one-second window %d (budget +5%% = %.1f; longest stall in a window over it %s); in flight max %d; sweep %s",
		len(reqs), worst, budget*1.05, stalled, e.sim.InFlightMax(), e.gc.Status().SweepDuration)
	if m := e.sim.InFlightMax(); m > cfg.Concurrency {
		t.Errorf("InFlightMax = %d, want <= concurrency %d", m, cfg.Concurrency)
	}
	noVMCheckedTwiceAtOnce(t, reqs)
	st := e.gc.Status()
	floor := time.Duration(float64(n) / budget * float64(time.Second))
	if st.SweepDuration < floor*9/10 || st.SweepDuration <= cfg.PingInterval {
		t.Errorf("sweep took %s; with %d VMs and %v req/s it cannot be under %s and must stretch past the %s interval",
			st.SweepDuration, n, budget, floor, cfg.PingInterval)
	}
	if st.Checked != n {
		t.Errorf("checked %d of %d VMs", st.Checked, n)
	}
	if v, _ := e.value("veil_guest_sweep_duration_seconds"); math.Abs(v-st.SweepDuration.Seconds()) > 1e-9 {
		t.Errorf("sweep_duration_seconds = %v, Status says %s", v, st.SweepDuration)
	}
	e.gc.mu.Lock()
	queued := len(e.gc.sched.queue)
	e.gc.mu.Unlock()
	if queued > n {
		t.Errorf("%d entries queued for %d VMs: work piles up", queued, n)
	}
}

// noVMCheckedTwiceAtOnce: no request of a VM's guest starts before the previous one ended (one
// VM is never checked by two workers at once).
func noVMCheckedTwiceAtOnce(t *testing.T, reqs []veiltest.Request) {
	t.Helper()
	byVM := map[string][]veiltest.Request{}
	for _, r := range reqs {
		for _, action := range []string{"guest-command", "available-guest-cmds"} {
			if id, ok := guestRequestVM(r.Path, action); ok {
				byVM[id] = append(byVM[id], r)
			}
		}
	}
	for id, rs := range byVM {
		for k := 1; k < len(rs); k++ {
			if rs[k].Start.Before(rs[k-1].Start.Add(rs[k-1].Duration)) {
				t.Errorf("VM %s had overlapping requests at %s", id, rs[k].Start.Format(time.StampMicro))
				break
			}
		}
	}
}

// TestGuestCheckerBoundsConcurrency: without a rate limit and with slow answers, the checker
// keeps exactly cfg.Concurrency calls in flight, never more, although the client allows 16.
func TestGuestCheckerBoundsConcurrency(t *testing.T) {
	o := guestSimOptions(30)
	o.Latency = 50 * time.Millisecond
	cfg := guestTestConfig()
	cfg.Concurrency = 4
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg, concurrency: 16})
	e.waitSweeps(1, 10*time.Second)
	m := e.sim.InFlightMax()
	t.Logf("in flight max %d", m)
	if m > cfg.Concurrency {
		t.Errorf("InFlightMax = %d, want <= concurrency %d", m, cfg.Concurrency)
	}
	if m < cfg.Concurrency {
		t.Errorf("InFlightMax = %d: demand exceeds capacity, yet fewer than %d calls ran at once", m, cfg.Concurrency)
	}
}

// TestGuestCheckerSpreadsPingsOverTheInterval: with no budget to hide a burst, pings of 100 VMs
// must come spread over the interval, not all at its start. The schedule runs on a virtual
// clock (each VM sent the moment it falls due, as by idle workers): in every 200 ms of two
// intervals at most twice the mean. The real checker then schedules each VM's next ping at its
// own phase of the interval, whatever the load delayed.
func TestGuestCheckerSpreadsPingsOverTheInterval(t *testing.T) {
	cfg := guestTestConfig()
	cfg.PingInterval = time.Second
	cfg.FSInfoInterval, cfg.TimeInterval, cfg.OSInfoInterval = time.Hour, time.Hour, time.Hour
	cfg.Concurrency = 16
	t.Run("virtual clock", func(t *testing.T) {
		const n, buckets = 100, 10 // 200 ms each over two intervals
		vcfg := cfg
		vcfg.NetworkInterval, vcfg.StatsInterval = time.Hour, 0 // the loop below plans pings only
		g := NewChecker("x", nil, vcfg, noDomains{}, Outputs{})
		start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
		for i := range n {
			v := g.sched.newVM(fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i*7919, i), start)
			v.os, v.nextOS = &veil.GuestOSInfo{}, time.Time{} // osinfo is not this test's subject
			heap.Push(&g.sched.queue, v)
		}
		counts := make([]int, buckets)
		for {
			v := heap.Pop(&g.sched.queue).(*guestVM)
			clock := v.due()
			k := int(clock.Sub(start) / (200 * time.Millisecond))
			if k >= buckets {
				break
			}
			due := func(t time.Time) bool { return !t.IsZero() && !t.After(clock) }
			p := checkPlan{ping: due(v.nextPing), fs: due(v.nextFS), time: due(v.nextTime), net: due(v.nextNet)}
			if p.ping {
				counts[k]++
			}
			g.sched.reschedule(v, clock, p)
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		if total != 2*n {
			t.Fatalf("%d pings in two intervals of %d VMs, want %d", total, n, 2*n)
		}
		mean := float64(total) / buckets
		t.Logf("pings per 200ms: %v", counts)
		for k, c := range counts {
			if float64(c) > 2*mean {
				t.Errorf("bucket %d has %d pings, mean %.1f: calls burst instead of spreading (%v)", k, c, mean, counts)
			}
		}
	})
	t.Run("real checker", func(t *testing.T) {
		e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(100), cfg: cfg})
		e.waitSweeps(2, 5*time.Second)
		e.gc.mu.Lock()
		defer e.gc.mu.Unlock()
		if len(e.gc.vms) != 100 {
			t.Fatalf("%d VMs followed, want 100", len(e.gc.vms))
		}
		for id, v := range e.gc.vms {
			at := v.nextPing.Sub(v.nextPing.Truncate(cfg.PingInterval))
			if want := time.Duration(v.phase * float64(cfg.PingInterval)); at != want {
				t.Errorf("%s: next ping %s into its interval, want its phase %s", id, at, want)
			}
		}
	})
}

func TestGuestPhaseSpreadsIDsEvenly(t *testing.T) {
	const n, buckets = 10000, 10
	counts := make([]int, buckets)
	for i := range n {
		p := guestPhase(fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i*7919, i))
		if p < 0 || p >= 1 {
			t.Fatalf("phase %v outside [0,1)", p)
		}
		counts[int(p*buckets)]++
	}
	for k, c := range counts {
		if c < n/buckets*85/100 || c > n/buckets*115/100 {
			t.Errorf("bucket %d has %d of %d ids: %v", k, c, n, counts)
		}
	}
	if guestPhase("a") != guestPhase("a") {
		t.Error("phase is not stable")
	}
}

func TestGuestScheduleSlots(t *testing.T) {
	base := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	iv := 10 * time.Second
	cases := []struct {
		name  string
		got   time.Time
		want  time.Time
		phase float64
	}{
		{"next slot at phase after t", guestNextSlot(base.Add(time.Second), iv, 0.5), base.Add(5 * time.Second), 0.5},
		{"slot already passed this interval", guestNextSlot(base.Add(6*time.Second), iv, 0.5), base.Add(15 * time.Second), 0.5},
		{"t on the slot", guestNextSlot(base.Add(5*time.Second), iv, 0.5), base.Add(5 * time.Second), 0.5},
		{"on time: one interval later", guestAdvance(base.Add(5*time.Second), iv, 0.5, base.Add(5500*time.Millisecond)), base.Add(15 * time.Second), 0.5},
		{"late: next slot from now, no catching up", guestAdvance(base.Add(5*time.Second), iv, 0.5, base.Add(31*time.Second)), base.Add(35 * time.Second), 0.5},
	}
	for _, c := range cases {
		if !c.got.Equal(c.want) {
			t.Errorf("%s: got %s, want %s", c.name, c.got.Format(time.TimeOnly), c.want.Format(time.TimeOnly))
		}
	}
}

// TestGuestRescheduleOfADownAgentWaitsForItsPing: checks due before the ping of an agent that
// missed its last one are not sent; they must not bring the VM back to a worker before the ping,
// or it would cycle through the workers doing nothing until then.
func TestGuestRescheduleOfADownAgentWaitsForItsPing(t *testing.T) {
	g := NewChecker("x", nil, guestTestConfig(), noDomains{}, Outputs{})
	now := time.Now()
	for _, c := range []struct {
		name string
		down bool
		want time.Time
	}{
		{"agent down: next visit at the ping", true, now.Add(time.Second)},
		{"agent up: fsinfo and time when due", false, now.Add(-time.Second)},
	} {
		v := &guestVM{id: c.name, agentDown: c.down, nextPing: now.Add(time.Second),
			nextFS: now.Add(-time.Second), nextTime: now.Add(-time.Second), guestMeasures: guestMeasures{os: &veil.GuestOSInfo{}}}
		g.mu.Lock()
		g.sched.reschedule(v, now, checkPlan{})
		g.mu.Unlock()
		if got := v.due(); !got.Equal(c.want) {
			t.Errorf("%s: next visit in %s, want %s", c.name, got.Sub(now), c.want.Sub(now))
		}
	}
}

// TestGuestCheckerWaitingForBudgetIsNoTimeout: a budget far below what the VMs ask for makes
// checks wait for the client's rate limiter, much longer than command_timeout; the timeout
// times the guest on the wire only, so no timeout is recorded and no agent is marked down.
func TestGuestCheckerWaitingForBudgetIsNoTimeout(t *testing.T) {
	const budget = 20.0
	cfg := guestTestConfig()
	cfg.Concurrency = 8 // eight workers share one permit every 50ms: the last waits 400ms
	cfg.CommandTimeout = 300 * time.Millisecond
	cfg.FSInfoInterval, cfg.TimeInterval, cfg.NetworkInterval = time.Hour, time.Hour, time.Hour
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(20), cfg: cfg, rate: budget, concurrency: 8})
	ids := e.eligibleIDs()
	e.waitSweeps(2, 30*time.Second)
	st := e.gc.Status()
	if floor := time.Duration(float64(len(ids)) / budget * float64(time.Second)); st.SweepDuration < floor*9/10 {
		t.Fatalf("sweep took %s, under the %s the budget allows: the budget did not hold the checks back", st.SweepDuration, floor)
	}
	for k, v := range e.series() {
		if strings.HasPrefix(k, "veil_guest_command_errors_total{") {
			t.Errorf("%s = %v: waiting for the budget was counted as a failure", k, v)
		}
	}
	for _, id := range ids {
		if v, ok := e.value("veil_guest_ping_success", "domain_id", id); !ok || v != 1 {
			t.Errorf("ping_success of %s = %v (present %v), want 1", id, v, ok)
		}
	}
	e.gc.mu.Lock()
	for id, v := range e.gc.vms {
		if v.agentDown {
			t.Errorf("agent of %s marked down", id)
		}
	}
	e.gc.mu.Unlock()
	if rs := e.runStatus(); !rs.Success {
		t.Errorf("RunStatus = %+v, want success", rs)
	}
}

// noDomains is a DomainSource that never has any.
type noDomains struct{}

func (noDomains) DomainsGen() ([]*veil.Domain, uint64) { return nil, 0 }

// TestGuestReadsSpreadOverSweepsWhenBehind runs the schedule on a virtual clock: 2,000 VMs, a
// budget of 100 requests/s, pings wanted every second and network reads every minute, so the
// checker runs behind and sweeps take about 30 s (20 s of pings, 10 of reads). Each sweep must
// carry its share of the reads: reading at the ping's phase, or counting the interval from the
// visit, gathered most VMs' reads into every other sweep (sweeps of 40 and 20 s by turns).
func TestGuestReadsSpreadOverSweepsWhenBehind(t *testing.T) {
	const (
		n      = 2000
		budget = 100.0
	)
	cfg := guestTestConfig()
	cfg.PingInterval, cfg.NetworkInterval = time.Second, time.Minute
	cfg.FSInfoInterval, cfg.TimeInterval, cfg.StatsInterval = 0, 0, 0 // the loop below plans pings and network reads only
	g := NewChecker("x", nil, cfg, noDomains{}, Outputs{})
	clock := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		v := g.sched.newVM(fmt.Sprintf("vm-%05d", i), clock)
		v.os, v.nextOS = &veil.GuestOSInfo{}, time.Time{} // osinfo is not this test's subject
		heap.Push(&g.sched.queue, v)
	}
	perRequest := time.Duration(float64(time.Second) / budget)
	floor := time.Duration(float64(n) / (budget - n/cfg.NetworkInterval.Seconds()) * float64(time.Second))
	pings, reads, sweepStart := 0, 0, clock
	for sweep := 1; sweep <= 12; {
		v := heap.Pop(&g.sched.queue).(*guestVM)
		if d := v.due(); d.After(clock) {
			clock = d
		}
		p := checkPlan{ping: !v.nextPing.After(clock), net: !v.nextNet.IsZero() && !v.nextNet.After(clock)}
		if p.ping {
			pings++
			clock = clock.Add(perRequest)
		}
		if p.net {
			reads++
			clock = clock.Add(perRequest)
		}
		g.sched.reschedule(v, clock, p)
		if pings < n {
			continue
		}
		dur := clock.Sub(sweepStart)
		share := float64(n) * dur.Seconds() / cfg.NetworkInterval.Seconds()
		t.Logf("sweep %d: %s, %d reads (share %.0f)", sweep, dur.Round(10*time.Millisecond), reads, share)
		// The first sweep reads every VM once (all fall due within it) and the second settles.
		if sweep > 2 {
			if dur < floor*85/100 || dur > floor*115/100 {
				t.Errorf("sweep %d took %s, want within 15%% of %s", sweep, dur.Round(10*time.Millisecond), floor)
			}
			if f := float64(reads) / share; f < 0.8 || f > 1.2 {
				t.Errorf("sweep %d carried %d network reads, want about %.0f", sweep, reads, share)
			}
		}
		sweep++
		pings, reads, sweepStart = 0, 0, clock
	}
}

// TestGuestSweepFailsWithTheControllerError: a sweep fails for the controller's errors, and its
// error names one of them, not a VM's refusal that came after it (the last failure of any kind);
// the next sweep keeps saying so until it ends. Failing sweeps are logged once when they start
// failing and once when one succeeds again.
func TestGuestSweepFailsWithTheControllerError(t *testing.T) {
	var logs bytes.Buffer
	g := NewChecker("x", nil, guestTestConfig(), noDomains{}, Outputs{Logger: log.NewLogfmtLogger(log.NewSyncWriter(&logs))})
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"vm-a", "vm-b"} {
		g.vms[id] = g.sched.newVM(id, now)
	}
	g.sweep.begin(now, g.vms)
	g.countError("vm-a", "guest-ping", "api_error", &veil.APIError{StatusCode: 500})
	g.countError("vm-b", "guest-ping", "agent_not_running", veil.ErrAgentNotRunning)
	check := func(when string) {
		t.Helper()
		st := g.RunStatus()[0]
		if st.Success || st.Error != "guest-ping on vm-a: api_error" {
			t.Errorf("%s: success %v, error %q; want a failure naming the controller's error on vm-a", when, st.Success, st.Error)
		}
	}
	check("during the sweep")
	g.leaveSweep("vm-a", now.Add(time.Second))
	g.leaveSweep("vm-b", now.Add(time.Second)) // the sweep ends, the next starts
	g.countError("vm-b", "guest-ping", "agent_not_running", veil.ErrAgentNotRunning)
	check("after it, during the next")
	for i := range 3 { // three more sweeps fail
		g.countError("vm-a", "guest-ping", "api_error", &veil.APIError{StatusCode: 503})
		g.leaveSweep("vm-a", now.Add(time.Duration(2+i)*time.Second))
		g.leaveSweep("vm-b", now.Add(time.Duration(2+i)*time.Second))
	}
	g.leaveSweep("vm-a", now.Add(9*time.Second))
	g.leaveSweep("vm-b", now.Add(9*time.Second))
	if st := g.RunStatus()[0]; !st.Success || st.Error != "" {
		t.Errorf("a sweep without controller errors: success %v, error %q; want success and no error", st.Success, st.Error)
	}
	if n, m := strings.Count(logs.String(), "guest sweep failed:"), strings.Count(logs.String(), "guest sweep succeeded again"); n != 1 || m != 1 {
		t.Errorf("logged %d failures and %d recoveries over four failed sweeps and a good one, want 1 and 1:\n%s", n, m, logs.String())
	}
}
