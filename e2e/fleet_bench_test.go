// The fleet's figures for make bench: 60 controllers of 1,000 VMs each (one bin/veil-sim
// process serving them all on 60 ports) shared by three bin/veil-exporter replicas on a
// three-node NATS cluster while events keep coming — how evenly they spread, how soon a killed
// replica's controllers run elsewhere, whether any healthy controller moves, whether every
// event is on the stream once, and what the controllers see compared with one exporter.

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	fleetWindow      = 30 * time.Second // six refreshes of every controller
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
//     divided by those from one exporter running all 60 over the same window (target <= 1.05);
//   - cpu-one-cores, cpu-replica-cores: CPU of the one exporter and of the busiest replica over
//     those windows, in cores; sim-cpu-cores the simulator's; hwm-one-MiB, hwm-replica-MiB their
//     peak resident memory (the largest replica's);
//   - inflight-refusals: "too many inflight" answers of the stream the exporters logged.
func BenchmarkFleet(b *testing.B) {
	cluster := testutil.StartCluster(b)
	dir := b.TempDir()
	exporter := testutil.Build(b, "cmd/veil-exporter")
	simBin := testutil.Build(b, "cmd/veil-sim")
	const token = "fleet-bench-token"
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	sim := startFleetSim(b, simBin, token)
	names := make([]string, fleetControllers)
	var ctrls strings.Builder
	for i, u := range sim.urls {
		names[i] = fmt.Sprintf("c%02d", i)
		fmt.Fprintf(&ctrls, "  - name: %s\n    url: %s\n    token_file: %s\n", names[i], u, tok)
	}
	proc := func(inst string) *replicaProc {
		cfg := filepath.Join(dir, inst+".yaml")
		body := "controllers:\n" + ctrls.String() +
			fmt.Sprintf("collect:\n  interval: %s\nguest:\n  enabled: false\n", fleetInterval) +
			"events:\n  enabled: true\n  poll_interval: 1s\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n", cluster.URLs(), fleetStream) +
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
	js := cluster.JetStream(b)
	leases := watchLeases(b, js)
	feed := sim.feed(b, names)

	// One exporter running all 60 (with ha on, alone: the stream and the positions bucket get
	// three replicas from the start, as in production).
	one := proc("solo")
	one.start()
	testutil.Eventually(b, 60*time.Second, func() bool { return ready(one) && len(leases.owners()) == fleetControllers },
		"the single exporter to hold all %d controllers", fleetControllers)
	leases.waitStable(b, 2*time.Second, nil)
	single, cpuOne, rssOne, simOne := sim.window(b, one)
	one.signal(syscall.SIGTERM)
	one.wait()

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
	count := leases.counts()
	lo, hi := fleetControllers, 0
	for _, inst := range insts {
		lo, hi = min(lo, count[inst]), max(hi, count[inst])
	}
	share := fleetControllers / len(insts)
	dev := max(hi-share, share-lo)
	three, cpuRep, rssRep, simThree := sim.window(b, reps[insts[0]], reps[insts[1]], reps[insts[2]])
	if float64(three) > 1.05*float64(single) {
		// Say why: the replicas' lines about the push channel (a controller without it is
		// listed every collect.interval).
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

	// kill -9 the owner of c00, takeoverTrials times (restarting it in between): its
	// controllers move, nobody else's.
	var takeovers []time.Duration
	var moved []string
	var victim string
	var after map[string]int
	for trial := range takeoverTrials {
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
		takeovers = append(takeovers, time.Since(killed))
		// Two lease times more: a survivor's controller handed over after the take-over shows by then.
		leases.waitStable(b, 2*fleetLeaseTTL, survivors)
		healthy := leases.movedSince(killed, func(ct string) bool { return before[ct] != victim })
		moved = append(moved, healthy...)
		// Say how each moved: X -> "" -> X is a lease that lapsed and was taken again by its
		// holder (its renewals came too late), X -> "" -> Y a hand-over or a take-over.
		for _, h := range leases.history(killed, healthy) {
			b.Logf("trial %d, kill -9 of %s: healthy %s", trial+1, victim, h)
		}
		after = leases.counts()
		if trial < takeoverTrials-1 {
			reps[victim].start()
			restarted := victim
			testutil.Eventually(b, 120*time.Second, func() bool { return leases.counts()[restarted] >= share-2 },
				"the restarted %s to take its share back", restarted)
			leases.waitStable(b, 2*fleetLeaseTTL, insts)
		}
	}

	// The end: stop the feed, wait for the stream to hold every event, judge each controller.
	journal := feed.stop()
	want := 0
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
	var lost, dup, disorder, foreign int
	for _, n := range names {
		v := classify(journal[n], got[n])
		lost, dup, disorder, foreign = lost+len(v.lost), dup+len(v.duplicated), disorder+len(v.outOfOrder), foreign+len(v.foreign)
	}
	refusals := 0
	for _, p := range append([]*replicaProc{one}, reps[insts[0]], reps[insts[1]], reps[insts[2]]) {
		log, _ := os.ReadFile(p.logPath)
		refusals += bytes.Count(log, []byte("too many inflight"))
	}

	bound := fleetLeaseTTL + 2*time.Second
	b.Logf("fleet: %d controllers x %d VMs; settled %v after the replicas started: %v; after the last kill -9 (of %s): %v; takeovers %v, %d healthy moved; %d events, lost %d, duplicated %d, out of order %d, foreign %d; requests one %d, three %d; CPU one %.2f cores, busiest replica %.2f, simulator %.2f/%.2f; VmHWM one %.0f MiB, largest replica %.0f MiB; too many inflight %d",
		fleetControllers, fleetVMs, settle.Round(100*time.Millisecond), count, victim, after, takeovers, len(moved), want, lost, dup, disorder, foreign, single, three, cpuOne, cpuRep, simOne, simThree, rssOne, rssRep, refusals)
	if len(moved) > 0 {
		b.Logf("healthy controllers moved: %v", moved)
	}
	b.ReportMetric(float64(dev), "spread-dev")
	b.ReportMetric(float64(dev)/2, "spread-ratio")
	b.ReportMetric(float64(lo), "spread-min")
	b.ReportMetric(float64(hi), "spread-max")
	b.ReportMetric(settle.Seconds(), "settle-s")
	reportTrials(b, "takeover", takeovers)
	b.ReportMetric(bound.Seconds(), "bound-s")
	b.ReportMetric(float64(len(moved)), "healthy-moved")
	b.ReportMetric(float64(want), "events")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(dup), "duplicated")
	b.ReportMetric(float64(disorder+foreign), "disorder")
	b.ReportMetric(float64(single), "requests-one")
	b.ReportMetric(float64(three), "requests-three")
	b.ReportMetric(float64(three)/float64(max(single, 1)), "requests-ratio")
	b.ReportMetric(cpuOne, "cpu-one-cores")
	b.ReportMetric(cpuRep, "cpu-replica-cores")
	b.ReportMetric(max(simOne, simThree), "sim-cpu-cores")
	b.ReportMetric(rssOne, "hwm-one-MiB")
	b.ReportMetric(rssRep, "hwm-replica-MiB")
	b.ReportMetric(float64(refusals), "inflight-refusals")
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

// fleetSim is one bin/veil-sim process serving fleetControllers controllers.
type fleetSim struct {
	pid  int
	urls []string
}

func startFleetSim(b *testing.B, bin, token string) *fleetSim {
	urls, pid := startSims(b, bin, fleetControllers, "--controllers", strconv.Itoa(fleetControllers),
		"--token", token, "--vms", strconv.Itoa(fleetVMs), "--nodes", "20", "--clusters", "2", "--datapools", "4",
		"--latency", "20ms", "--initial-events", "0", "--event-rate", "0", "--events-order", "oldest_first")
	return &fleetSim{pid: pid, urls: urls}
}

// call sends a control request to controller i and decodes the answer into v (nil: ignored).
func (s *fleetSim) call(i int, method, path string, body, v any) error {
	var rd *bytes.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, s.urls[i]+path, rd)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitSteady waits until no controller has had a collection listed in full (domains, disks)
// for two collect.intervals: every controller's first listings are done and its push channel
// is open (a controller without it is listed every interval). A window opened earlier counts
// the start-up listings of some controllers and not of others, and the ratio of the two
// windows measured when each exporter started, not what replicas cost.
func (s *fleetSim) waitSteady(b *testing.B) {
	b.Helper()
	quiet := 2 * fleetInterval
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s.each(b, func(i int) error { return s.call(i, "POST", "/_sim/requests/reset", nil, nil) })
		since := time.Now()
		var listed atomic.Bool
		// which[i] counts the full listings of controller i in this window, by path: a failure
		// says which controllers were listed and what, so that a push that does not open (the
		// domains listed every interval) is told from listings cut off and started again.
		which := make([]map[string]int, len(s.urls))
		for !listed.Load() && time.Since(since) < quiet {
			time.Sleep(time.Second) // polling the controllers' request logs
			s.each(b, func(i int) error {
				var log []struct {
					Path string `json:"path"`
				}
				err := s.call(i, "GET", "/_sim/requests", nil, &log)
				for _, r := range log {
					if r.Path == "/api/domains/" || r.Path == "/api/vdisks/" {
						listed.Store(true)
						if which[i] == nil {
							which[i] = map[string]int{}
						}
						which[i][r.Path]++
					}
				}
				return err
			})
		}
		if !listed.Load() {
			return
		}
		if time.Now().After(deadline) {
			var named []string
			for i, w := range which {
				if w != nil && len(named) < 12 {
					named = append(named, fmt.Sprintf("controller %d: %v", i, w))
				}
			}
			b.Fatalf("controllers still listed in full after 2 minutes (a push channel does not open, or first listings are cut off and start again): %s", strings.Join(named, "; "))
		}
	}
}

// foldIDs replaces the path segments that are ids (uuids) by {id}.
func foldIDs(path string) string {
	seg := strings.Split(path, "/")
	for i, s := range seg {
		if len(s) == 36 && strings.Count(s, "-") == 4 {
			seg[i] = "{id}"
		}
	}
	return strings.Join(seg, "/")
}

// window counts the requests every controller receives over fleetWindow, and the CPU the
// exporters and the simulator use meanwhile: that of the busiest exporter, in cores; rss is the
// largest peak resident memory (VmHWM) of the exporters, in MiB.
func (s *fleetSim) window(b *testing.B, procs ...*replicaProc) (requests int, busiest, rss, sim float64) {
	b.Helper()
	s.waitSteady(b)
	// Every controller's window opens and closes at the same instant, give or take the
	// calls' own time: each call goes at once, not one after another.
	s.each(b, func(i int) error { return s.call(i, "POST", "/_sim/requests/reset", nil, nil) })
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = cpuTime(b, p.cmd.Process.Pid)
	}
	sim0, start := cpuTime(b, s.pid), time.Now()
	time.Sleep(fleetWindow) // the measured window
	counts := make([]int, len(s.urls))
	s.each(b, func(i int) error {
		var st struct {
			Requests int `json:"requests"`
		}
		err := s.call(i, "GET", "/_sim/state", nil, &st)
		counts[i] = st.Requests
		return err
	})
	for _, n := range counts {
		requests += n
	}
	// What the requests were, over every controller (a path's id segments folded): a ratio
	// above 1 says which collection was read more than one exporter reads it.
	var mu sync.Mutex
	byPath := map[string]int{}
	s.each(b, func(i int) error {
		var log []struct {
			Path string `json:"path"`
		}
		err := s.call(i, "GET", "/_sim/requests", nil, &log)
		mu.Lock()
		defer mu.Unlock()
		for _, r := range log {
			byPath[foldIDs(r.Path)]++
		}
		return err
	})
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("requests of every controller over the window: %v; load average %s", byPath, strings.TrimSpace(string(load)))
	el := time.Since(start).Seconds()
	for i, p := range procs {
		busiest = max(busiest, (cpuTime(b, p.cmd.Process.Pid)-cpu0[i]).Seconds()/el)
		rss = max(rss, peakRSS(b, p.cmd.Process.Pid))
	}
	return requests, busiest, rss, (cpuTime(b, s.pid) - sim0).Seconds() / el
}

// cpuTime is the user and system time of process pid (/proc/<pid>/stat, clock ticks of 10 ms).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// each runs f for every controller at once and fails the benchmark on an error.
func (s *fleetSim) each(b *testing.B, f func(i int) error) {
	b.Helper()
	errs := make([]error, len(s.urls))
	var wg sync.WaitGroup
	for i := range s.urls {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// peakRSS is the peak resident memory (VmHWM) of process pid in MiB.
func peakRSS(b *testing.B, pid int) float64 { return statusKB(b, pid, "VmHWM:") / 1024 }

// eventFeed adds 100 events to every controller at once (a catch-up for the first owner), then
// one every 500 ms, and keeps each one's journal.
type eventFeed struct {
	mu      sync.Mutex
	journal map[string][]string
	quit    chan struct{}
	done    chan struct{}
}

func (s *fleetSim) feed(b *testing.B, names []string) *eventFeed {
	f := &eventFeed{journal: map[string][]string{}, quit: make(chan struct{}), done: make(chan struct{})}
	add := func(k int) {
		for i, n := range names {
			var r struct {
				IDs []string `json:"ids"`
			}
			if err := s.call(i, "POST", "/_sim/events", map[string]int{"n": k}, &r); err != nil {
				b.Errorf("feeding %s: %v", n, err)
				continue
			}
			f.mu.Lock()
			f.journal[n] = append(f.journal[n], r.IDs...)
			f.mu.Unlock()
		}
	}
	add(100)
	go func() {
		defer close(f.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.quit:
				return
			case <-tick.C:
			}
			add(1)
		}
	}()
	b.Cleanup(func() {
		select {
		case <-f.quit:
		default:
			close(f.quit)
		}
		<-f.done
	})
	return f
}

// stop ends the feed and returns each controller's journal: the initial events, then those fed.
func (f *eventFeed) stop() map[string][]string {
	close(f.quit)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.journal
}

// leaseWatch follows the lease bucket: who holds each controller, and every change of holder.
type leaseWatch struct {
	mu      sync.Mutex
	holder  map[string]string // controller -> instance of its lease record ("" once deleted)
	changes []leaseChange
}

type leaseChange struct {
	at         time.Time
	controller string
	from, to   string
}

func watchLeases(b *testing.B, js jetstream.JetStream) *leaseWatch {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var kv jetstream.KeyValue
	// The first replica creates the bucket; watch it as soon as it exists.
	w := &leaseWatch{holder: map[string]string{}}
	go func() {
		for ctx.Err() == nil {
			var err error
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			kv, err = js.KeyValue(cctx, "VEIL_EXPORTER_LEASES")
			ccancel()
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond): // the bucket does not exist yet
				}
				continue
			}
			wt, err := kv.Watch(ctx, "leases.>")
			if err != nil {
				continue
			}
			for e := range wt.Updates() {
				if e == nil {
					continue
				}
				ct := strings.TrimPrefix(e.Key(), "leases.")
				to := ""
				if e.Operation() == jetstream.KeyValuePut {
					var r struct {
						Instance string `json:"instance"`
					}
					_ = json.Unmarshal(e.Value(), &r)
					to = r.Instance
				}
				w.mu.Lock()
				if from := w.holder[ct]; from != to {
					w.changes = append(w.changes, leaseChange{time.Now(), ct, from, to})
				}
				w.holder[ct] = to
				w.mu.Unlock()
			}
			return
		}
	}()
	return w
}

// owners maps each controller with a lease record to the instance it names.
func (w *leaseWatch) owners() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for ct, i := range w.holder {
		if i != "" {
			out[ct] = i
		}
	}
	return out
}

func (w *leaseWatch) counts() map[string]int {
	out := map[string]int{}
	for _, i := range w.owners() {
		out[i]++
	}
	return out
}

// waitStable waits until every controller is held by one of insts (any instance when nil) and
// no holder changed for quiet.
func (w *leaseWatch) waitStable(b *testing.B, quiet time.Duration, insts []string) {
	b.Helper()
	testutil.Eventually(b, 120*time.Second, func() bool {
		o := w.owners()
		if len(o) != fleetControllers {
			return false
		}
		for _, i := range o {
			if insts != nil && !slices.Contains(insts, i) {
				return false
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.changes) > 0 && time.Since(w.changes[len(w.changes)-1].at) >= quiet
	}, "every controller held by %v, no holder changing for %v", insts, quiet)
}

// lastChange is when a holder last changed.
func (w *leaseWatch) lastChange() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.changes) == 0 {
		return time.Time{}
	}
	return w.changes[len(w.changes)-1].at
}

// movedSince lists the controllers, of those which selects, whose holder changed after t.
func (w *leaseWatch) movedSince(t time.Time, which func(controller string) bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.changes {
		if c.at.After(t) && which(c.controller) && !slices.Contains(out, c.controller) {
			out = append(out, c.controller)
		}
	}
	slices.Sort(out)
	return out
}

// history lists, for the controllers cts, every change of holder after t: who to whom and when
// after t ("-" for no record: deleted).
func (w *leaseWatch) history(t time.Time, cts []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.changes {
		if c.at.After(t) && slices.Contains(cts, c.controller) {
			out = append(out, fmt.Sprintf("%s %s -> %s at +%v", c.controller, cmp.Or(c.from, "-"), cmp.Or(c.to, "-"), c.at.Sub(t).Round(10*time.Millisecond)))
		}
	}
	return out
}
