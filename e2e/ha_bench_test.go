// The replicas' figures for make bench: how long a killed or paused owner's controllers take to
// move, and what three replicas cost the controllers compared with one exporter.

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// BenchmarkReplicas runs once whatever b.N (make bench asks for 1x). It reports
//   - takeover-s: kill -9 of an owner until its controllers run elsewhere, the median of
//     takeoverTrials trials (takeover-worst-s the slowest, judged against the bound lease_ttl +
//     2 s, bound-s);
//   - stop-takeover-s: the same after SIGSTOP of an owner, which leaves its connections open;
//   - requests-ratio: requests the controllers received from three replicas over a window,
//     divided by those from one exporter without replicas over the same window (target <= 1.05).
func BenchmarkReplicas(b *testing.B) {
	cluster := testutil.StartCluster(b)
	dir := b.TempDir()
	bin := testutil.Build(b, "cmd/veil-exporter")
	const token = "ha-bench-token"
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(token), 0o600)
	var sims []*veiltest.Server
	var ctrls strings.Builder
	for i := range 3 {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: token, VMs: 50, InitialEvents: 100, EventsOrder: "oldest_first"})
		b.Cleanup(sim.Close)
		sims = append(sims, sim)
		fmt.Fprintf(&ctrls, "  - name: c%d\n    url: %s\n    token_file: %s\n", i, sim.URL, tok)
	}
	const leaseTTL = 3 * time.Second
	conf := func(name, ha string) string {
		f := filepath.Join(dir, name+".yaml")
		body := "controllers:\n" + ctrls.String() +
			"collect:\n  interval: 2s\nguest:\n  enabled: true\n  ping_interval: 5s\n" +
			"events:\n  enabled: true\n  poll_interval: 250ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n", cluster.URLs()) + ha
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		return f
	}
	proc := func(name, ha string) *replicaProc {
		p := &replicaProc{t: b, bin: bin, cfg: conf(name, ha), web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(b)), logPath: filepath.Join(dir, name+".log")}
		b.Cleanup(func() {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		})
		return p
	}
	requests := func() int {
		n := 0
		for _, s := range sims {
			n += len(s.Requests())
		}
		return n
	}
	resetRequests := func() {
		for _, s := range sims {
			s.ResetRequests()
		}
	}
	const window = 20 * time.Second

	// One exporter without replicas: the requests of a window once it is ready.
	one := proc("one", "")
	one.start()
	testutil.Eventually(b, 30*time.Second, func() bool { return ready(one) }, "the single exporter to be ready")
	resetRequests()
	time.Sleep(window) // the measured window
	single := requests()
	one.signal(syscall.SIGTERM)
	one.wait()

	// Three replicas: the same window once every controller has one owner.
	names := []string{"c0", "c1", "c2"}
	reps := map[string]*replicaProc{}
	for _, inst := range []string{"pod-a", "pod-b", "pod-c"} {
		reps[inst] = proc(inst, fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: %s\n  replicas: 3\n", inst, leaseTTL))
		reps[inst].start()
	}
	settled := func(live map[string]*replicaProc) bool {
		if !oneOwnerEach(live, names) {
			return false
		}
		for _, p := range live {
			if len(p.runs()) == 0 {
				return false
			}
		}
		return true
	}
	testutil.Eventually(b, 60*time.Second, func() bool { return settled(reps) }, "one owner per controller, spread over three replicas")
	resetRequests()
	time.Sleep(window) // the measured window
	three := requests()

	// moveAfter sends sig to the owner of c0 and times until every controller runs on exactly
	// one of the others.
	moveAfter := func(sig syscall.Signal) (string, time.Duration) {
		victim := ownersOf(reps)["c0"][0]
		rest := map[string]*replicaProc{}
		for inst, p := range reps {
			if inst != victim {
				rest[inst] = p
			}
		}
		sent := time.Now()
		reps[victim].signal(sig)
		if sig == syscall.SIGKILL {
			reps[victim].wait()
		}
		testutil.Eventually(b, leaseTTL+30*time.Second, func() bool { return oneOwnerEach(rest, names) }, "the controllers of the replica sent %v to move", sig)
		return victim, time.Since(sent)
	}
	var kills, stops []time.Duration
	for range takeoverTrials {
		victim, d := moveAfter(syscall.SIGKILL)
		kills = append(kills, d)
		reps[victim].start()
		testutil.Eventually(b, 60*time.Second, func() bool { return settled(reps) }, "the restarted replica to take its share")
	}
	for range takeoverTrials {
		victim, d := moveAfter(syscall.SIGSTOP)
		stops = append(stops, d)
		reps[victim].signal(syscall.SIGCONT)
		testutil.Eventually(b, 60*time.Second, func() bool { return settled(reps) }, "the paused replica to take its share once it runs again")
	}

	b.ReportMetric((leaseTTL + 2*time.Second).Seconds(), "bound-s")
	reportTrials(b, "takeover", kills)
	reportTrials(b, "stop-takeover", stops)
	b.ReportMetric(float64(single), "requests-one")
	b.ReportMetric(float64(three), "requests-three")
	b.ReportMetric(float64(three)/float64(max(single, 1)), "requests-ratio")
}

// takeoverTrials is how many times each takeover is timed: one trial says little of a figure
// that depends on where in its renewal period a lease was when its owner died.
const takeoverTrials = 3

// reportTrials reports the trials of one timed figure: <name>-s their median, <name>-worst-s
// the slowest, <name>-trials how many.
func reportTrials(b *testing.B, name string, ds []time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	b.ReportMetric(s[len(s)/2].Seconds(), name+"-s")
	b.ReportMetric(s[len(s)-1].Seconds(), name+"-worst-s")
	b.ReportMetric(float64(len(s)), name+"-trials")
}

// ready says whether the exporter answers /-/ready with 200.
func ready(p *replicaProc) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.web + "/-/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}
