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
	const token = "ha-bench-token"
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(token), 0o600)
	rb := &replicaBench{b: b, dir: dir, bin: testutil.Build(b, "cmd/veil-exporter"), clusterURLs: cluster.URLs(),
		names: []string{"c0", "c1", "c2"}}
	var ctrls strings.Builder
	for i := range 3 {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: token, VMs: 50, InitialEvents: 100, EventsOrder: "oldest_first"})
		b.Cleanup(sim.Close)
		rb.sims = append(rb.sims, sim)
		fmt.Fprintf(&ctrls, "  - name: c%d\n    url: %s\n    token_file: %s\n", i, sim.URL, tok)
	}
	rb.ctrls = ctrls.String()
	// In 20 s about 1,100 requests, the ratio 0.992-1.019; a 15 s window measured 1.052 (912
	// against 867): a poll more or less of a controller weighs more in a shorter window.
	const window = 20 * time.Second

	// One exporter without replicas: the requests of a window once it is ready.
	one := rb.proc("one", "")
	one.start()
	testutil.Eventually(b, 30*time.Second, func() bool { return ready(one) }, "the single exporter to be ready")
	rb.resetRequests()
	time.Sleep(window) // the measured window
	single := rb.requests()
	one.signal(syscall.SIGTERM)
	one.wait()

	// Three replicas: the same window once every controller has one owner.
	rb.reps = map[string]*replicaProc{}
	for _, inst := range []string{"pod-a", "pod-b", "pod-c"} {
		rb.reps[inst] = rb.proc(inst, fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: %s\n  replicas: 3\n", inst, replicaBenchTTL))
		rb.reps[inst].start()
	}
	testutil.Eventually(b, 60*time.Second, rb.settled, "one owner per controller, spread over three replicas")
	rb.resetRequests()
	time.Sleep(window) // the measured window
	three := rb.requests()

	var kills, stops []time.Duration
	for range takeoverTrials {
		victim, d := rb.moveAfter(syscall.SIGKILL)
		kills = append(kills, d)
		rb.reps[victim].start()
		testutil.Eventually(b, 60*time.Second, rb.settled, "the restarted replica to take its share")
	}
	for range takeoverTrials {
		victim, d := rb.moveAfter(syscall.SIGSTOP)
		stops = append(stops, d)
		rb.reps[victim].signal(syscall.SIGCONT)
		testutil.Eventually(b, 60*time.Second, rb.settled, "the paused replica to take its share once it runs again")
	}

	b.ReportMetric((replicaBenchTTL + 2*time.Second).Seconds(), "bound-s")
	reportTrials(b, "takeover", kills)
	reportTrials(b, "stop-takeover", stops)
	b.ReportMetric(float64(single), "requests-one")
	b.ReportMetric(float64(three), "requests-three")
	b.ReportMetric(float64(three)/float64(max(single, 1)), "requests-ratio")
}

// replicaBenchTTL is the lease_ttl of BenchmarkReplicas's replicas.
const replicaBenchTTL = 3 * time.Second

// replicaBench is BenchmarkReplicas's world: the simulators of its controllers (ctrls, as YAML
// entries) and the replicas.
type replicaBench struct {
	b           *testing.B
	dir, bin    string
	clusterURLs string
	ctrls       string
	names       []string
	sims        []*veiltest.Server
	reps        map[string]*replicaProc
}

// conf writes the config of exporter name with the ha section ha.
func (rb *replicaBench) conf(name, ha string) string {
	f := filepath.Join(rb.dir, name+".yaml")
	body := "controllers:\n" + rb.ctrls +
		"collect:\n  interval: 2s\nguest:\n  enabled: true\n  ping_interval: 5s\n" +
		"events:\n  enabled: true\n  poll_interval: 250ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
		fmt.Sprintf("nats:\n  url: %q\n", rb.clusterURLs) + ha
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		rb.b.Fatal(err)
	}
	return f
}

// proc is exporter name with the ha section ha, not started, killed at the end if it runs.
func (rb *replicaBench) proc(name, ha string) *replicaProc {
	p := &replicaProc{t: rb.b, bin: rb.bin, cfg: rb.conf(name, ha), web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(rb.b)), logPath: filepath.Join(rb.dir, name+".log")}
	rb.b.Cleanup(func() {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// requests is the number of requests the simulators served since their last reset.
func (rb *replicaBench) requests() int {
	n := 0
	for _, s := range rb.sims {
		n += len(s.Requests())
	}
	return n
}

func (rb *replicaBench) resetRequests() {
	for _, s := range rb.sims {
		s.ResetRequests()
	}
}

// settled says whether every controller has one owner and every replica runs something.
func (rb *replicaBench) settled() bool {
	if !oneOwnerEach(rb.reps, rb.names) {
		return false
	}
	for _, p := range rb.reps {
		if len(p.runs()) == 0 {
			return false
		}
	}
	return true
}

// moveAfter sends sig to the owner of c0 and times until every controller runs on exactly one
// of the others.
func (rb *replicaBench) moveAfter(sig syscall.Signal) (string, time.Duration) {
	victim := ownersOf(rb.reps)["c0"][0]
	rest := map[string]*replicaProc{}
	for inst, p := range rb.reps {
		if inst != victim {
			rest[inst] = p
		}
	}
	sent := time.Now()
	rb.reps[victim].signal(sig)
	if sig == syscall.SIGKILL {
		rb.reps[victim].wait()
	}
	testutil.Eventually(rb.b, replicaBenchTTL+30*time.Second, func() bool { return oneOwnerEach(rest, rb.names) }, "the controllers of the replica sent %v to move", sig)
	return victim, time.Since(sent)
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
