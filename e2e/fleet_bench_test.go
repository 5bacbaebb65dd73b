// The fleet's figures for make bench: 60 controllers of 1,000 VMs each (one bin/veil-sim
// process serving them all on 60 ports) shared by three bin/veil-exporter replicas on a
// three-node NATS cluster while events keep coming — how evenly they spread, how soon a killed
// replica's controllers run elsewhere, whether any healthy controller moves, whether every
// event is on the stream once, and what the controllers see compared with one exporter.

package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

const (
	fleetControllers = 60
	fleetVMs         = 1000
	fleetLeaseTTL    = 3 * time.Second
	fleetInterval    = 5 * time.Second  // collect.interval
	fleetPoll        = time.Second      // events.poll_interval
	fleetWindow      = 30 * time.Second // six refreshes of every controller (make bench-fleet)
	// fleetBenchWindow is BenchmarkFleet's: four refreshes of every controller (in 30 s about
	// 4,300 requests, three replicas' 1.004-1.037 of one exporter's; make bench's whole run has
	// a goal).
	fleetBenchWindow = 20 * time.Second
	fleetStream      = "FLEET_EVENTS"
)

// BenchmarkFleet runs once whatever b.N (make bench asks for 1x). It reports
//   - spread-dev: the largest distance of a replica's count from 60/3 once the owners settled
//     (spread-ratio: to the goal of 2, target <= 1), spread-min and spread-max;
//   - takeover-s: kill -9 of a replica until every one of its controllers is held by a
//     survivor (ratio-to-bound: to lease_ttl + 2 s, target <= 1);
//   - healthy-moved: controllers of the survivors whose owner changed from the kill until two
//     lease times after the take-over (target 0);
//   - lost, duplicated, disorder: journal ids of every controller not once and in order on the
//     stream at the end (target 0 each);
//   - requests-ratio: requests the controllers received from three replicas over a window,
//     divided by those from one exporter running all 60 over the same window (target <= 1.05),
//     as judged counts them: without the version's, and the one exporter's event polls at least
//     as many as the replicas' up to what its poll_interval schedules;
//   - cpu-one-cores, cpu-replica-cores: CPU of the one exporter and of the busiest replica over
//     those windows, in cores; sim-cpu-cores the simulator's; hwm-one-MiB, hwm-replica-MiB their
//     peak resident memory (the largest replica's);
//   - inflight-refusals: "too many inflight" answers of the stream the exporters logged.
func BenchmarkFleet(b *testing.B) {
	phases := newPhaseLog(b)
	cluster := testutil.StartCluster(b)
	dir := b.TempDir()
	exporter := testutil.Build(b, "cmd/veil-exporter")
	simBin := testutil.Build(b, "cmd/veil-sim")
	const token = "fleet-bench-token"
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	sim := startFleetSim(b, simBin, token, fleetControllers, fleetVMs)
	names := make([]string, fleetControllers)
	var ctrls strings.Builder
	for i, u := range sim.urls {
		names[i] = fmt.Sprintf("c%02d", i)
		fmt.Fprintf(&ctrls, "  - name: %s\n    url: %s\n    token_file: %s\n", names[i], u, tok)
	}
	proc := func(inst string) *replicaProc {
		return fleetProc(b, dir, exporter, ctrls.String(), cluster.URLs(), inst)
	}
	js := cluster.JetStream(b)
	leases := watchLeases(b, js, fleetControllers)
	feed := sim.feed(b, names, 100, 500*time.Millisecond)

	// One exporter running all 60 (with ha on, alone: the stream and the positions bucket get
	// three replicas from the start, as in production).
	one := proc("solo")
	phases.done("NATS, the simulator and the feed")
	singleCount, cpuOne, rssOne, simOne := fleetSolo(b, sim, leases, one, fleetBenchWindow)
	phases.done("the single exporter's start and window")

	// Three replicas: the same window once the owners settled.
	insts := []string{"pod-a", "pod-b", "pod-c"}
	reps := map[string]*replicaProc{}
	for _, inst := range insts {
		reps[inst] = proc(inst)
		reps[inst].start()
	}
	// Hand-overs go one at a time, at most one per renew period (lease_ttl/3) from each replica:
	// two lease times without one is the end of them.
	settleStart := time.Now()
	leases.waitStable(b, 2*fleetLeaseTTL, insts)
	settle := leases.lastChange().Sub(settleStart)
	count, lo, hi, share, dev := fleetSpread(leases.counts(), insts, fleetControllers)
	threeCount, cpuRep, rssRep, simThree := sim.window(b, fleetBenchWindow, reps[insts[0]], reps[insts[1]], reps[insts[2]])
	three, single := judged(threeCount, singleCount, fleetControllers, fleetBenchWindow, fleetPoll)
	if float64(three) > 1.05*float64(single) {
		logPushLines(b, reps, insts)
	}
	phases.done("the replicas' start, settling and window")

	takeovers, moved, victim, after := fleetKills(b, leases, reps, insts, names, share)
	phases.done("the kills and restarts")
	defer phases.done("the feed's end and the judging")
	// The end: stop the feed, wait for the stream to hold every event, judge each controller.
	journal := feed.stop()
	want, lost, dup, disorder, foreign := fleetJudge(b, js, journal, leases, reps, names)
	refusals := inflightRefusals(one, reps[insts[0]], reps[insts[1]], reps[insts[2]])

	fleetFigures{settle: settle, count: count, victim: victim, after: after, takeovers: takeovers, moved: moved,
		want: want, lost: lost, dup: dup, disorder: disorder, foreign: foreign, single: single, three: three,
		cpuOne: cpuOne, cpuRep: cpuRep, simOne: simOne, simThree: simThree, rssOne: rssOne, rssRep: rssRep,
		refusals: refusals, dev: dev, lo: lo, hi: hi}.report(b)
}

// fleetKills kill -9s the owner of c00 takeoverTrials times (restarting it in between): its
// controllers move, nobody else's. It returns each take-over's time, the healthy controllers
// that moved, the last victim and the owners' counts after its kill.
func fleetKills(b *testing.B, leases *leaseWatch, reps map[string]*replicaProc, insts, names []string, share int) (takeovers []time.Duration, moved []string, victim string, after map[string]int) {
	for trial := range takeoverTrials {
		var took time.Duration
		var healthy []string
		victim, took, healthy, after = fleetKill(b, leases, reps, insts, names, trial)
		takeovers = append(takeovers, took)
		moved = append(moved, healthy...)
		if trial < takeoverTrials-1 {
			reps[victim].start()
			restarted := victim
			testutil.Eventually(b, 120*time.Second, func() bool { return leases.counts()[restarted] >= share-2 },
				"the restarted %s to take its share back", restarted)
			leases.waitStable(b, 2*fleetLeaseTTL, insts)
		}
	}
	return takeovers, moved, victim, after
}

// inflightRefusals counts the "too many inflight" lines in the logs of procs.
func inflightRefusals(procs ...*replicaProc) int {
	refusals := 0
	for _, p := range procs {
		log, _ := os.ReadFile(p.logPath)
		refusals += bytes.Count(log, []byte("too many inflight"))
	}
	return refusals
}

// fleetFigures are what BenchmarkFleet measured.
type fleetFigures struct {
	settle                             time.Duration
	count, after                       map[string]int
	victim                             string
	takeovers                          []time.Duration
	moved                              []string
	want, lost, dup, disorder, foreign int
	single, three                      int
	cpuOne, cpuRep, simOne, simThree   float64
	rssOne, rssRep                     float64
	refusals, dev, lo, hi              int
}

// report logs the figures and reports them as the benchmark's metrics.
func (fig fleetFigures) report(b *testing.B) {
	bound := fleetLeaseTTL + 2*time.Second
	b.Logf("fleet: %d controllers x %d VMs; settled %v after the replicas started: %v; after the last kill -9 (of %s): %v; takeovers %v, %d healthy moved; %d events, lost %d, duplicated %d, out of order %d, foreign %d; requests one %d, three %d; CPU one %.2f cores, busiest replica %.2f, simulator %.2f/%.2f; VmHWM one %.0f MiB, largest replica %.0f MiB; too many inflight %d",
		fleetControllers, fleetVMs, fig.settle.Round(100*time.Millisecond), fig.count, fig.victim, fig.after, fig.takeovers, len(fig.moved), fig.want, fig.lost, fig.dup, fig.disorder, fig.foreign, fig.single, fig.three, fig.cpuOne, fig.cpuRep, fig.simOne, fig.simThree, fig.rssOne, fig.rssRep, fig.refusals)
	if len(fig.moved) > 0 {
		b.Logf("healthy controllers moved: %v", fig.moved)
	}
	b.ReportMetric(float64(fig.dev), "spread-dev")
	b.ReportMetric(float64(fig.dev)/2, "spread-ratio")
	b.ReportMetric(float64(fig.lo), "spread-min")
	b.ReportMetric(float64(fig.hi), "spread-max")
	b.ReportMetric(fig.settle.Seconds(), "settle-s")
	reportTrials(b, "takeover", fig.takeovers)
	b.ReportMetric(bound.Seconds(), "bound-s")
	b.ReportMetric(float64(len(fig.moved)), "healthy-moved")
	b.ReportMetric(float64(fig.want), "events")
	b.ReportMetric(float64(fig.lost), "lost")
	b.ReportMetric(float64(fig.dup), "duplicated")
	b.ReportMetric(float64(fig.disorder+fig.foreign), "disorder")
	b.ReportMetric(float64(fig.single), "requests-one")
	b.ReportMetric(float64(fig.three), "requests-three")
	b.ReportMetric(float64(fig.three)/float64(max(fig.single, 1)), "requests-ratio")
	b.ReportMetric(fig.cpuOne, "cpu-one-cores")
	b.ReportMetric(fig.cpuRep, "cpu-replica-cores")
	b.ReportMetric(max(fig.simOne, fig.simThree), "sim-cpu-cores")
	b.ReportMetric(fig.rssOne, "hwm-one-MiB")
	b.ReportMetric(fig.rssRep, "hwm-replica-MiB")
	b.ReportMetric(float64(fig.refusals), "inflight-refusals")
}

// fleetProc is replica inst of the fleet (not started) with the controllers ctrls (YAML
// entries), on the cluster at clusterURLs; killed at the end if it runs.
func fleetProc(b *testing.B, dir, exporter, ctrls, clusterURLs, inst string) *replicaProc {
	cfg := filepath.Join(dir, inst+".yaml")
	body := "controllers:\n" + ctrls +
		fmt.Sprintf("collect:\n  interval: %s\nguest:\n  enabled: false\n", fleetInterval) +
		"events:\n  enabled: true\n  poll_interval: " + fleetPoll.String() + "\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
		fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n", clusterURLs, fleetStream) +
		fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: %s\n  replicas: 3\n", inst, fleetLeaseTTL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	p := &replicaProc{t: b, bin: exporter, cfg: cfg, web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(b)), logPath: filepath.Join(dir, inst+".log")}
	b.Cleanup(func() {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// logPushLines says why the replicas asked more than one exporter: their lines about the push
// channel (a controller without it is listed every collect.interval).
func logPushLines(b *testing.B, reps map[string]*replicaProc, insts []string) {
	for _, inst := range insts {
		log, _ := os.ReadFile(reps[inst].logPath)
		n := 0
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "push") && n < 15 {
				b.Logf("%s: %s", inst, l)
				n++
			}
		}
	}
}

// fleetKill kills -9 the owner of c00 and waits until its controllers moved to the others, and
// for two lease times more (a survivor's controller handed over after the take-over shows by
// then): it returns the victim, how long the take-over took, the healthy controllers that moved
// and the controllers each replica then holds.
func fleetKill(b *testing.B, leases *leaseWatch, reps map[string]*replicaProc, insts, names []string, trial int) (victim string, took time.Duration, healthy []string, after map[string]int) {
	before := leases.owners()
	victim = before["c00"]
	var survivors []string
	for _, inst := range insts {
		if inst != victim {
			survivors = append(survivors, inst)
		}
	}
	killed := time.Now()
	reps[victim].signal(syscall.SIGKILL)
	reps[victim].wait()
	testutil.Eventually(b, fleetLeaseTTL+30*time.Second, func() bool {
		o := leases.owners()
		for _, n := range names {
			if !slices.Contains(survivors, o[n]) {
				return false
			}
		}
		return true
	}, "the controllers of %s to move to %v", victim, survivors)
	took = time.Since(killed)
	// Two lease times more: a survivor's controller handed over after the take-over shows by then.
	leases.waitStable(b, 2*fleetLeaseTTL, survivors)
	healthy = leases.movedSince(killed, func(ct string) bool { return before[ct] != victim })
	// Say how each moved: X -> "" -> X is a lease that lapsed and was taken again by its
	// holder (its renewals came too late), X -> "" -> Y a hand-over or a take-over.
	for _, h := range leases.history(killed, healthy) {
		b.Logf("trial %d, kill -9 of %s: healthy %s", trial+1, victim, h)
	}
	return victim, took, healthy, leases.counts()
}

// fleetJudge waits for the stream to hold every event of journal, then classifies each
// controller's: the events wanted, lost, duplicated, out of order and foreign.
func fleetJudge(b *testing.B, js jetstream.JetStream, journal map[string][]string, leases *leaseWatch, reps map[string]*replicaProc, names []string) (want, lost, dup, disorder, foreign int) {
	for _, ids := range journal {
		want += len(ids)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if info := streamInfo(js, fleetStream); info != nil && int(info.State.Msgs) >= want {
			break
		}
		if time.Now().After(deadline) {
			fleetShortfall(b, js, journal, leases.owners(), reps)
			b.Fatalf("timed out after 60 s waiting for %d events on %s", want, fleetStream)
		}
	}
	got := readWholeStream(b, js, fleetStream)
	for _, n := range names {
		v := classify(journal[n], got[n])
		lost, dup, disorder, foreign = lost+len(v.lost), dup+len(v.duplicated), disorder+len(v.outOfOrder), foreign+len(v.foreign)
	}
	return want, lost, dup, disorder, foreign
}

// fleetShortfall says, when the stream lacks events at the end, which controllers miss how
// many, who holds each, and the last lines each replica logged about it.
func fleetShortfall(b *testing.B, js jetstream.JetStream, journal map[string][]string, owners map[string]string, reps map[string]*replicaProc) {
	got := readWholeStream(b, js, fleetStream)
	for _, n := range slices.Sorted(maps.Keys(journal)) {
		v := classify(journal[n], got[n])
		if len(v.lost)+len(v.duplicated) == 0 {
			continue
		}
		b.Logf("%s (held by %q): %d journal events, %d on the stream, %d missing (first %v), %d twice", n, owners[n],
			len(journal[n]), len(got[n]), len(v.lost), v.lost[:min(3, len(v.lost))], len(v.duplicated))
		for _, inst := range slices.Sorted(maps.Keys(reps)) {
			log, _ := os.ReadFile(reps[inst].logPath)
			var mine []string
			for _, l := range strings.Split(string(log), "\n") {
				if strings.Contains(l+" ", "controller="+n+" ") && !strings.Contains(l, "level=debug") {
					mine = append(mine, l)
				}
			}
			for _, l := range mine[max(0, len(mine)-12):] {
				b.Logf("  %s: %s", inst, l)
			}
		}
	}
}

// fleetSpread is how the controllers spread over insts: the count of each, the least and most
// held, the even share and the deviation from it.
func fleetSpread(count map[string]int, insts []string, n int) (_ map[string]int, lo, hi, share, dev int) {
	lo, hi = n, 0
	for _, inst := range insts {
		lo, hi = min(lo, count[inst]), max(hi, count[inst])
	}
	share = n / len(insts)
	return count, lo, hi, share, max(hi-share, share-lo)
}

// fleetSolo starts one, the single exporter, waits until it holds every controller, measures
// its window (length: the same as the replicas' it is compared with) and stops it.
func fleetSolo(b *testing.B, sim *fleetSim, leases *leaseWatch, one *replicaProc, length time.Duration) (requests requestCount, busiest, rss, simCPU float64) {
	one.start()
	testutil.Eventually(b, 60*time.Second+time.Duration(leases.want)*100*time.Millisecond, func() bool { return ready(one) && len(leases.owners()) == leases.want },
		"the single exporter to hold all %d controllers", leases.want)
	leases.waitStable(b, 2*time.Second, nil)
	requests, busiest, rss, simCPU = sim.window(b, length, one)
	one.signal(syscall.SIGTERM)
	one.wait()
	return requests, busiest, rss, simCPU
}
