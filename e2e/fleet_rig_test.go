package e2e

// The fleet benchmark's rig: the simulator process serving every controller, its request
// windows, the event feed and the watch of the leases.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// fleetSim is one bin/veil-sim process serving every controller of a fleet, one port each.
type fleetSim struct {
	pid     int
	urls    []string
	timeout time.Duration // of a control request (0: 10 s)
}

// startFleetSim starts the simulator with n controllers of vms VMs each.
func startFleetSim(b *testing.B, bin, token string, n, vms int) *fleetSim {
	urls, pid := startSims(b, bin, n, "--controllers", strconv.Itoa(n),
		"--token", token, "--vms", strconv.Itoa(vms), "--nodes", "20", "--clusters", "2", "--datapools", "4",
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
	c := http.Client{Timeout: cmp.Or(s.timeout, 10*time.Second)}
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
func (s *fleetSim) waitSteady(b *testing.B, procs ...*replicaProc) {
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
			for _, p := range procs {
				logPushState(b, p)
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

// requestCount is what every controller was asked over a window: in all, and by path (ids
// folded).
type requestCount struct {
	total  int
	byPath map[string]int
}

// judged is what a request ratio compares of the windows of length of several replicas (r)
// and of one exporter (one). Not the version's: each controller's is read every
// inventory.VersionEvery refreshes from its first, so whether a 20 s window holds it depends on
// when its exporter started (one exporter starting all 60 at once: none or all of them). And
// the one exporter's event polls count at least as many as the replicas made, up to the
// poll_interval's schedule for controllers: one exporter that falls behind its schedule (all 60
// on a machine of one core) asks less than it should, and replicas on schedule make no extra
// request; polls beyond the schedule still count against them.
func judged(r, one requestCount, controllers int, length, poll time.Duration) (replicas, single int) {
	const version, events = "/api/controllers/base-version/", "/api/events/"
	replicas = r.total - r.byPath[version]
	single = one.total - one.byPath[version]
	ev := one.byPath[events]
	single += max(ev, min(r.byPath[events], controllers*int(length/poll))) - ev
	return replicas, single
}

// window counts the requests every controller receives over length, and the CPU the
// exporters and the simulator use meanwhile: that of the busiest exporter, in cores; rss is the
// largest peak resident memory (VmHWM) of the exporters, in MiB.
func (s *fleetSim) window(b *testing.B, length time.Duration, procs ...*replicaProc) (requests requestCount, busiest, rss, sim float64) {
	b.Helper()
	s.waitSteady(b, procs...)
	// Every controller's window opens and closes at the same instant, give or take the
	// calls' own time: each call goes at once, not one after another.
	s.each(b, func(i int) error { return s.call(i, "POST", "/_sim/requests/reset", nil, nil) })
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = cpuTime(b, p.cmd.Process.Pid)
	}
	sim0, start := cpuTime(b, s.pid), time.Now()
	time.Sleep(length) // the measured window
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
		requests.total += n
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
	// On stdout: a benchmark's log shows only its first lines.
	fmt.Printf("fleet: requests of every controller over the window: %v; load average %s\n", byPath, strings.TrimSpace(string(load)))
	el := time.Since(start).Seconds()
	for i, p := range procs {
		busiest = max(busiest, (cpuTime(b, p.cmd.Process.Pid)-cpu0[i]).Seconds()/el)
		rss = max(rss, peakRSS(b, p.cmd.Process.Pid))
	}
	requests.byPath = byPath
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

// eventFeed adds initial events to every controller at once (a catch-up for the first owner),
// then one to every controller each period, and keeps each one's journal.
type eventFeed struct {
	mu      sync.Mutex
	journal map[string][]string
	quit    chan struct{}
	done    chan struct{}
}

func (s *fleetSim) feed(b *testing.B, names []string, initial int, period time.Duration) *eventFeed {
	f := &eventFeed{journal: map[string][]string{}, quit: make(chan struct{}), done: make(chan struct{})}
	// Eight controllers fed at a time: one after another, 500 of them take longer than a
	// period on a busy machine; each controller still gets its events in order.
	add := func(k int) {
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for i, n := range names {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				var r struct {
					IDs []string `json:"ids"`
				}
				if err := s.call(i, "POST", "/_sim/events", map[string]int{"n": k}, &r); err != nil {
					b.Errorf("feeding %s: %v", n, err)
					return
				}
				f.mu.Lock()
				f.journal[n] = append(f.journal[n], r.IDs...)
				f.mu.Unlock()
			})
		}
		wg.Wait()
	}
	add(initial)
	go func() {
		defer close(f.done)
		tick := time.NewTicker(period)
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
	want    int // the controllers of the fleet
	mu      sync.Mutex
	holder  map[string]string    // controller -> instance of its lease record ("" once deleted)
	written map[string]time.Time // controller -> when its lease record was last written (its renewed)
	changes []leaseChange
}

type leaseChange struct {
	at         time.Time
	controller string
	from, to   string
}

func watchLeases(b *testing.B, js jetstream.JetStream, controllers int) *leaseWatch {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var kv jetstream.KeyValue
	// The first replica creates the bucket; watch it as soon as it exists.
	w := &leaseWatch{want: controllers, holder: map[string]string{}, written: map[string]time.Time{}}
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
				var r struct {
					Instance string    `json:"instance"`
					Renewed  time.Time `json:"renewed"`
				}
				if e.Operation() == jetstream.KeyValuePut {
					_ = json.Unmarshal(e.Value(), &r)
					to = r.Instance
				}
				w.mu.Lock()
				if from := w.holder[ct]; from != to {
					w.changes = append(w.changes, leaseChange{time.Now(), ct, from, to})
				}
				w.holder[ct] = to
				if to != "" {
					w.written[ct] = r.Renewed // the replicas run on this host: the same clock
				}
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
		if len(o) != w.want {
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

// logPushState says what an exporter's log tells of its push channels and listings when the
// fleet does not settle: how many channels opened and were lost, and its last warnings.
func logPushState(b *testing.B, p *replicaProc) {
	log, _ := os.ReadFile(p.logPath)
	var opened, lost, acquired int
	var warns []string
	released := map[string]int{} // by why
	for _, l := range strings.Split(string(log), "\n") {
		switch {
		case strings.Contains(l, `"controller acquired"`):
			acquired++
		case strings.Contains(l, `"controller released"`):
			why := l[strings.Index(l, "why")+1:] // logfmt or JSON: the reason's first words
			released[why[:min(len(why), 30)]]++
		case strings.Contains(l, "push channel open"):
			opened++
		case strings.Contains(l, "push channel lost") || strings.Contains(l, "no push channel"):
			lost++
		}
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			warns = append(warns, l)
		}
	}
	b.Logf("%s: push channels opened %d, lost %d; controllers acquired %d, released %v; %d warnings, the last:",
		p.logPath, opened, lost, acquired, released, len(warns))
	for _, w := range warns[max(0, len(warns)-15):] {
		b.Logf("  %s", cut(w, 400))
	}
}
