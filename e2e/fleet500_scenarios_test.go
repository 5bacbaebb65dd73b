package e2e

// The large fleet benchmark's later scenarios — the rolling restart, a NATS node lost, the
// whole NATS cluster down — the judgement of every controller's events, and the report.

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// rollingRestart restarts every slot as a Deployment rolls it: SIGTERM, wait for the exit,
// start a new pod, wait until it answers /-/ready, next. It reports the moves of every
// controller (goal: at most two per restart of its holder), the longest time any controller's
// events stopped reaching the stream, and how long until the assignment settled again.
func (r *fleetRun) rollingRestart() {
	start := time.Now()
	restartsOf := map[string]int{} // controller -> restarts of the replica holding it
	for slot := range r.plan.replicas {
		old := r.reps.name(slot)
		for ct, o := range r.leases.owners() {
			if o == old {
				restartsOf[ct]++
			}
		}
		r.reps.procs[slot].signal(syscall.SIGTERM)
		r.reps.procs[slot].wait()
		r.reps.start(slot)
		p := r.reps.procs[slot]
		testutil.Eventually(r.b, 60*time.Second, func() bool { return ready(p) }, "%s to answer /-/ready", r.reps.name(slot))
	}
	rolled := time.Since(start)
	ok, last := r.leases.waitStableFor(r.plan.ttl, 5*time.Minute, r.reps.insts(), r.floor())
	end := time.Now()
	moves := r.leases.moves(start)
	most, over, total := 0, 0, 0
	for _, n := range r.names {
		most, total = max(most, moves[n]), total+moves[n]
		if moves[n] > 2*restartsOf[n] {
			over++
		}
	}
	worst, who, each := r.arrive.longestGap(r.names, start, end)
	r.pauseAccount(start, who, each)
	r.fig["roll-s"], r.fig["roll-moves-max"], r.fig["roll-moves-over-goal"] = rolled.Seconds(), float64(most), float64(over)
	r.fig["roll-moves-mean"] = float64(total) / float64(len(r.names))
	r.fig["roll-pause-s"] = worst.Seconds()
	r.note("rolling restart of %d replicas: %v until the last was ready; settled %v, %v after the start; moves per controller at most %d (mean %.2f), %d above two per restart of its holder; longest pause %v (%s; events fed every %v)",
		r.plan.replicas, rolled.Round(100*time.Millisecond), ok, last.Sub(start).Round(100*time.Millisecond), most, r.fig["roll-moves-mean"], over, worst.Round(100*time.Millisecond), who, r.plan.feed)
	if ok {
		r.fig["roll-settle-s"] = last.Sub(start).Seconds()
	}
}

// pauseAccount prints how the pauses of the rolling restart spread (how many controllers
// stopped for over 30 s, the median), and for the longest one the controller's holders and
// what every pod logged about it from start on.
func (r *fleetRun) pauseAccount(start time.Time, who string, each map[string]time.Duration) {
	var all []time.Duration
	long := 0
	for _, d := range each {
		all = append(all, d)
		if d > 30*time.Second {
			long++
		}
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	r.fig["roll-pauses-over-30s"] = float64(long)
	r.fig["roll-pause-median-s"] = all[len(all)/2].Seconds()
	r.note("rolling restart pauses: median %v, 90th percentile %v, %d controllers over 30 s; %s's holders: %v",
		all[len(all)/2].Round(100*time.Millisecond), all[len(all)*9/10].Round(100*time.Millisecond), long, who, r.leases.history(start, []string{who}))
	logs, _ := filepath.Glob(filepath.Join(r.reps.dir, "*.log"))
	for _, l := range logs {
		raw, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line+" ", "controller="+who+" ") && !strings.Contains(line, "level=debug") && logTime(line).After(start) {
				fmt.Printf("fleet:   %s: %s\n", filepath.Base(l), line)
			}
		}
	}
}

// logTime is the ts= of a log line (zero when it has none).
func logTime(line string) time.Time {
	_, rest, ok := strings.Cut(line, "ts=")
	if !ok {
		return time.Time{}
	}
	ts, _, _ := strings.Cut(rest, " ")
	t, _ := time.Parse(time.RFC3339Nano, ts)
	return t
}

// natsNodeLoss kills -9 the node leading the events stream while events flow, and starts it
// again 15 s later: the controllers that moved, the longest pause of any controller's events.
func (r *fleetRun) natsNodeLoss() {
	node := r.cluster.StreamLeader(fleetStream)
	if node == nil {
		node = r.cluster.Nodes[0]
	}
	before := r.leases.owners()
	start := time.Now()
	node.Kill()
	time.Sleep(15 * time.Second) // the cluster runs on two nodes meanwhile
	node.Start()
	ok, _ := r.leases.waitStableFor(r.plan.ttl, 2*time.Minute, r.reps.insts(), r.floor())
	end := time.Now()
	moved := r.leases.movedSince(start, func(string) bool { return true })
	worst, who, _ := r.arrive.longestGap(r.names, start, end)
	r.fig["nats-node-moved"], r.fig["nats-node-pause-s"] = float64(len(moved)), worst.Seconds()
	changed := 0
	for ct, o := range r.leases.owners() {
		if before[ct] != o {
			changed++
		}
	}
	r.note("kill -9 of NATS node %s (the stream's leader) for 15 s: %d controllers changed holder meanwhile (%d at the end), settled %v; longest pause %v (%s)",
		node.Name(), len(moved), changed, ok, worst.Round(100*time.Millisecond), who)
}

// natsOutage kills every NATS node, keeps the cluster down for the plan's outage and starts it
// again: how long until every controller is held again, and until the stream holds every event
// the controllers had when NATS came back (the catch-up).
func (r *fleetRun) natsOutage() {
	before := r.leases.owners()
	for _, n := range r.cluster.Nodes {
		n.Kill()
	}
	time.Sleep(r.plan.outage) // the outage
	for _, n := range r.cluster.Nodes {
		n.Start()
	}
	back := time.Now()
	// A watch of the bucket does not outlive the whole cluster: a new one, whose first values
	// are the records as they were (renewed before back).
	r.leases = watchLeases(r.b, r.js, r.plan.controllers)
	want := r.journalTotal()
	held, caught := time.Duration(-1), time.Duration(-1)
	for limit := back.Add(5 * time.Minute); time.Now().Before(limit) && caught < 0; time.Sleep(200 * time.Millisecond) {
		if held < 0 && r.leases.writtenSince(back) {
			held = time.Since(back)
		}
		if info := streamInfo(r.js, fleetStream); info != nil && int(info.State.Msgs) >= want {
			caught = time.Since(back)
		}
	}
	if caught < 0 {
		r.note("catch-up after the outage NOT MEASURED: the stream did not reach the %d events of the journal within 5 minutes", want)
		return
	}
	r.leases.waitStableFor(r.plan.ttl, 2*time.Minute, r.reps.insts(), r.floor())
	changed := 0
	for ct, o := range r.leases.owners() {
		if before[ct] != o {
			changed++
		}
	}
	r.fig["outage-moved"] = float64(changed)
	r.fig["outage-catchup-s"] = caught.Seconds()
	if held >= 0 {
		r.fig["outage-held-s"] = held.Seconds()
	}
	r.note("NATS down %v: every controller's lease written again %v after it came back, the stream caught up with the %d journal events in %v; %d controllers on another replica than before",
		r.plan.outage, held.Round(100*time.Millisecond), want, caught.Round(100*time.Millisecond), changed)
}

// journalTotal is how many events the feed has added so far.
func (r *fleetRun) journalTotal() int {
	r.feed.mu.Lock()
	defer r.feed.mu.Unlock()
	n := 0
	for _, ids := range r.feed.journal {
		n += len(ids)
	}
	return n
}

// judge stops the feed, waits for the stream to hold every event and classifies each
// controller's: lost, duplicated, out of order, and the controllers with any of them.
func (r *fleetRun) judge() {
	journal := r.feed.stop()
	want := 0
	for _, ids := range journal {
		want += len(ids)
	}
	reps := map[string]*replicaProc{}
	for i, p := range r.reps.procs {
		reps[r.reps.name(i)] = p
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if info := streamInfo(r.js, fleetStream); info != nil && int(info.State.Msgs) >= want {
			break
		}
		if time.Now().After(deadline) {
			fleetShortfall(r.b, r.js, journal, r.leases.owners(), reps)
			r.note("the stream lacks events after 3 minutes (see above)")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	got := readWholeStream(r.b, r.js, fleetStream)
	var lost, dup, disorder, bad int
	for _, n := range r.names {
		v := classify(journal[n], got[n])
		lost, dup, disorder = lost+len(v.lost), dup+len(v.duplicated), disorder+len(v.outOfOrder)+len(v.foreign)
		if len(v.lost)+len(v.duplicated)+len(v.outOfOrder)+len(v.foreign) > 0 {
			bad++
		}
	}
	r.fig["events"], r.fig["lost"], r.fig["duplicated"], r.fig["disorder"], r.fig["controllers-wrong"] = float64(want), float64(lost), float64(dup), float64(disorder), float64(bad)
	// Every pod's log, those restarted included (each has its own).
	logs, _ := filepath.Glob(filepath.Join(r.reps.dir, "*.log"))
	refusals := 0
	for _, l := range logs {
		raw, _ := os.ReadFile(l)
		refusals += bytes.Count(raw, []byte("too many inflight"))
	}
	r.fig["inflight-refusals"] = float64(refusals)
	r.note("%d events of %d controllers: lost %d, duplicated %d, out of order or foreign %d; %d controllers with any; \"too many inflight\" answers logged %.0f",
		want, len(r.names), lost, dup, disorder, bad, r.fig["inflight-refusals"])
}

// fleetMetrics are the figures a whole run reports, in order.
var fleetMetrics = []string{"settle-s", "spread-dev", "spread-min", "spread-max", "settle-sim-cores", "settle-nats-cores",
	"settle-replicas-cores", "requests-one", "requests-replicas", "requests-ratio", "cpu-one-cores", "hwm-one-MiB",
	"cpu-replica-cores", "hwm-replica-MiB", "cpu-per-controller-mcores", "rss-per-controller-MiB", "nats-cores",
	"sim-cpu-cores", "lease-writes-per-s", "takeover-s", "takeover-of", "healthy-moved", "rejoin-s", "roll-s",
	"roll-settle-s", "roll-moves-max", "roll-moves-mean", "roll-moves-over-goal", "roll-pause-s", "roll-pauses-over-30s", "roll-pause-median-s", "quiet-gap-median-s", "quiet-gap-max-s", "nats-node-moved",
	"nats-node-pause-s", "outage-held-s", "outage-moved", "outage-catchup-s", "events", "lost", "duplicated", "disorder",
	"controllers-wrong", "inflight-refusals"}

// report reports every figure measured as a metric, and names those not measured.
func (r *fleetRun) report() {
	r.fig["controllers"], r.fig["replicas"], r.fig["vms"] = float64(r.plan.controllers), float64(r.plan.replicas), float64(r.plan.vms)
	r.fig["lease-ttl-s"], r.fig["bound-s"] = r.plan.ttl.Seconds(), (r.plan.ttl + 2*time.Second).Seconds()
	var missing []string
	for _, m := range fleetMetrics {
		if _, ok := r.fig[m]; !ok {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		r.note("NOT MEASURED: %v", missing)
	}
	for _, m := range slices.Sorted(maps.Keys(r.fig)) {
		r.b.ReportMetric(r.fig[m], m)
	}
}
