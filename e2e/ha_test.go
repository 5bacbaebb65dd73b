// Replicas as an operator runs them: three veil-exporter processes on a three-node NATS cluster
// share three controllers while events keep coming, through kill -9 of an owner, SIGTERM of an
// owner, the loss of the NATS server leading the stream, and an owner paused past its lease,
// while VMs are powered on and off. At the end every event is on the stream exactly once and in
// order per controller, and the inventory bucket holds what each controller lists, each key's
// history the controller's own values in order, none stored twice in a row.

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

const haLeaseTTL = 3 * time.Second

// replicaProc is one exporter process that the test kills, stops and starts again.
type replicaProc struct {
	t        testing.TB
	bin, cfg string
	web      string
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{}
	// startWait is how long start waits for /-/healthy (0: 20 s); a large fleet's replica on
	// a loaded machine takes longer to bind its port.
	startWait time.Duration
}

func (p *replicaProc) start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(p.bin, "--config.file", p.cfg, "--web.listen-address", p.web)
	testutil.DieWithTest(p.cmd)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	u := "http://" + p.web + "/-/healthy"
	testutil.EventuallyNil(p.t, cmp.Or(p.startWait, 20*time.Second), func() error {
		resp, err := http.Get(u)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}, "%s to answer 200", u)
}

// endWithTest kills the process (woken first, if paused) when the test ends, and logs the tail
// of its log when the test failed.
func (p *replicaProc) endWithTest(t *testing.T, name string) {
	t.Cleanup(func() {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		testutil.RaceReport(t, name, p.logPath)
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("--- %s (tail)\n%s", name, b)
		}
	})
}

func (p *replicaProc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("signal %v: %v", s, err)
	}
}

func (p *replicaProc) wait() {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Fatal("exporter did not exit")
	}
}

var haLeaderRE = regexp.MustCompile(`(?m)^veil_ha_leader\{controller="([^"]+)"\} 1$`)

// runs is what the replica's /metrics says it runs; nil when it does not answer (stopped).
func (p *replicaProc) runs() []string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.web + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out []string
	for _, g := range haLeaderRE.FindAllStringSubmatch(b.String(), -1) {
		out = append(out, g[1])
	}
	return out
}

func TestReplicasSurviveKillStopAndNATSLeaderLoss(t *testing.T) {
	cluster := testutil.StartCluster(t)
	dir := t.TempDir()
	bin := testutil.Build(t, "cmd/veil-exporter")
	const token = "ha-e2e-token"
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(token), 0o600)

	names := []string{"alpha", "bravo", "charlie"}
	sims := map[string]*veiltest.Server{}
	var ctrls strings.Builder
	for i, n := range names {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: token, VMs: 3, InitialEvents: -1, InitialTasks: -1, EventsOrder: "oldest_first", ChangeLog: 100_000})
		t.Cleanup(sim.Close)
		sims[n] = sim
		fmt.Fprintf(&ctrls, "  - name: %s\n    url: %s\n    token_file: %s\n", n, sim.URL, tok)
	}
	const stream = "VEIL_EVENTS"
	procs := startHAReplicas(t, bin, dir, ctrls.String(), cluster.URLs(), stream)

	stopFeed := startHAFeed(names, sims)

	all := []string{"pod-a", "pod-b", "pod-c"}
	r := &haReplicas{t: t, procs: procs, names: names, all: all}
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(all...) }, "every controller run by exactly one replica")

	// 1. kill -9 an owner: its controllers move after its leases expire.
	victim := r.owner("alpha")
	killed := time.Now()
	procs[victim].signal(syscall.SIGKILL)
	procs[victim].wait()
	r.moved("kill -9", victim, killed)
	procs[victim].start()
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(all...) }, "the restarted replica to join")

	// 2. SIGTERM an owner: it releases its leases, so the others need not wait for them to expire.
	victim = r.owner("bravo")
	termed := time.Now()
	procs[victim].signal(syscall.SIGTERM)
	procs[victim].wait()
	r.moved("SIGTERM", victim, termed)
	if b, _ := os.ReadFile(procs[victim].logPath); !strings.Contains(string(b), `why="shutting down"`) {
		t.Errorf("%s did not release its leases on SIGTERM (they would have had to expire)", victim)
	}
	procs[victim].start()
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(all...) }, "the restarted replica to join")

	// 3. The NATS server leading the stream goes away mid-stream: a new leader is elected and
	// forwarding goes on; the server comes back.
	js := cluster.JetStream(t)
	loseStreamLeader(t, cluster, js, stream)
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(all...) }, "every controller owned once after the NATS leader's loss")

	// 4. SIGSTOP an owner past its lease, then SIGCONT: the others take over while it sleeps;
	// awake, it lets go without publishing or saving anything.
	victim = r.owner("charlie")
	stopped := time.Now()
	procs[victim].signal(syscall.SIGSTOP)
	r.moved("SIGSTOP", victim, stopped)
	procs[victim].signal(syscall.SIGCONT)
	testutil.Eventually(t, 30*time.Second, func() bool { return r.oneEach(all...) }, "every controller owned once after SIGCONT")

	// The end: every event created on each controller is on the stream once, in order.
	created := stopFeed()
	checkStreamHoldsJournals(t, js, stream, names, sims, created)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "VEIL_INVENTORY")
	if err != nil {
		t.Fatal(err)
	}
	checkInventoryBucket(t, kv, sims)
}

// startHAReplicas starts the replicas pod-a, pod-b and pod-c with the controllers ctrls (YAML
// entries), events and HA on the cluster at clusterURLs; each ends with the test.
func startHAReplicas(t *testing.T, bin, dir, ctrls, clusterURLs, stream string) map[string]*replicaProc {
	procs := map[string]*replicaProc{}
	for _, inst := range []string{"pod-a", "pod-b", "pod-c"} {
		cfg := filepath.Join(dir, inst+".yaml")
		body := "controllers:\n" + ctrls +
			"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n  inventory: {history: 64}\n", clusterURLs, stream) +
			fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: %s\n  replicas: 3\n", inst, haLeaseTTL)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		p := &replicaProc{t: t, bin: bin, cfg: cfg, web: freeAddr(t), logPath: filepath.Join(dir, inst+".log")}
		procs[inst] = p
		p.endWithTest(t, inst)
		p.start()
	}
	return procs
}

// startHAFeed keeps events coming on every controller, and powers VMs on and off (twice a
// second on each controller), which the inventory bucket follows. stop ends it and returns the
// events created on each controller.
func startHAFeed(names []string, sims map[string]*veiltest.Server) (stop func() map[string][]string) {
	var mu sync.Mutex
	created := map[string][]string{}
	stopFeed := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopFeed:
				return
			case <-tick.C:
			}
			mu.Lock()
			for _, n := range names {
				created[n] = append(created[n], sims[n].AddEvents(3, veiltest.EventSpec{})...)
				if i%5 == 0 {
					togglePower(sims[n], i/5)
				}
			}
			mu.Unlock()
		}
	}()
	return func() map[string][]string {
		close(stopFeed)
		<-fed
		mu.Lock()
		defer mu.Unlock()
		return created
	}
}

// checkStreamHoldsJournals: every event of each controller's journal (those created and those
// of the VMs powered on and off) is on the stream once, in order.
func checkStreamHoldsJournals(t *testing.T, js jetstream.JetStream, stream string, names []string, sims map[string]*veiltest.Server, created map[string][]string) {
	t.Helper()
	for _, n := range names {
		all := journal(t, sims[n])
		if len(all) < len(created[n]) {
			t.Fatalf("%s: the journal holds %d events, fewer than the %d added", n, len(all), len(created[n]))
		}
		created[n] = all
	}
	want := 0
	for _, ids := range created {
		want += len(ids)
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return streamCount(t, js, stream) >= want },
		"%d events on the stream", want)
	got := readStream(t, js, stream, want)
	for _, n := range names {
		exactlyOnceInOrder(t, n, created[n], got[n])
	}
}

// loseStreamLeader stops the NATS server leading the stream mid-stream, waits for forwarding to
// go on without it, and starts it again.
func loseStreamLeader(t *testing.T, cluster *testutil.Cluster, js jetstream.JetStream, stream string) {
	t.Helper()
	var lost *testutil.NATS
	testutil.Eventually(t, 20*time.Second, func() bool {
		info := streamInfo(js, stream)
		lost = cluster.StreamLeader(stream)
		return lost != nil && info != nil && info.Cluster != nil && len(info.Cluster.Replicas) == 2
	}, "stream %s with a leader and two replicas (the exporter creates it with ha.replicas 3)", stream)
	leader := lost.Name()
	before := streamCount(t, js, stream)
	lost.Stop()
	testutil.Eventually(t, 30*time.Second, func() bool { return streamCount(t, js, stream) > before+30 },
		"forwarding to go on without the stream's leader %s", leader)
	lost.Start()
}

// haReplicas are the replicas of TestReplicasSurviveKillStopAndNATSLeaderLoss and the
// controllers they share.
type haReplicas struct {
	t     *testing.T
	procs map[string]*replicaProc
	names []string
	all   []string
}

// live are the replicas insts.
func (r *haReplicas) live(insts ...string) map[string]*replicaProc {
	m := map[string]*replicaProc{}
	for _, i := range insts {
		m[i] = r.procs[i]
	}
	return m
}

// oneEach says whether every controller is run by exactly one of insts.
func (r *haReplicas) oneEach(insts ...string) bool { return oneOwnerEach(r.live(insts...), r.names) }

// without are the replicas but inst.
func (r *haReplicas) without(inst string) []string {
	return slices.DeleteFunc(slices.Clone(r.all), func(s string) bool { return s == inst })
}

// moved waits until every controller of victim is run by exactly one of the others. How long
// that takes is a figure for make bench, logged here, not asserted.
func (r *haReplicas) moved(what, victim string, since time.Time) {
	r.t.Helper()
	testutil.Eventually(r.t, haLeaseTTL+20*time.Second, func() bool { return r.oneEach(r.without(victim)...) },
		"%s: controllers of %s to move to the others", what, victim)
	r.t.Logf("%s: controllers of %s moved in %v (lease_ttl %v)", what, victim, time.Since(since), haLeaseTTL)
}

// owner is the one replica that runs ct, once there is one.
func (r *haReplicas) owner(ct string) string {
	r.t.Helper()
	var o []string
	testutil.Eventually(r.t, 20*time.Second, func() bool { o = ownersOf(r.live(r.all...))[ct]; return len(o) == 1 }, "one owner of %s", ct)
	return o[0]
}

// journal is every event of the simulator's journal, oldest first.
func journal(t *testing.T, sim *veiltest.Server) []string {
	t.Helper()
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for off := 0; ; off += 100 {
		page, err := client.EventsPage(context.Background(), off, 100, "created")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Results {
			ids = append(ids, e.ID)
		}
		if len(page.Results) < 100 {
			return ids
		}
	}
}

// togglePower powers the k-th VM (round robin, templates left out) on if it is off, off if not.
func togglePower(sim *veiltest.Server, k int) {
	var vms []string
	for _, id := range sim.DomainIDs() {
		if d, _ := sim.Domain(id); !d.Template {
			vms = append(vms, id)
		}
	}
	if len(vms) == 0 {
		return
	}
	id := vms[k%len(vms)]
	if d, _ := sim.Domain(id); d.PowerState == 1 {
		sim.PowerOn(id)
	} else {
		sim.PowerOff(id)
	}
}

// ownersOf maps each controller to the replicas whose /metrics say they run it.
func ownersOf(procs map[string]*replicaProc) map[string][]string {
	o := map[string][]string{}
	for inst, p := range procs {
		for _, ct := range p.runs() {
			o[ct] = append(o[ct], inst)
		}
	}
	return o
}

// oneOwnerEach says whether each of names is run by exactly one of procs.
func oneOwnerEach(procs map[string]*replicaProc, names []string) bool {
	o := ownersOf(procs)
	for _, n := range names {
		if len(o[n]) != 1 {
			return false
		}
	}
	return true
}

// streamInfo is the stream's information, nil when it cannot be had now.
func streamInfo(js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// streamCount is how many messages the stream holds, -1 when it cannot be had now.
func streamCount(t *testing.T, js jetstream.JetStream, stream string) int {
	if info := streamInfo(js, stream); info != nil {
		return int(info.State.Msgs)
	}
	return -1
}

// readStream reads the first n messages of the stream by sequence and groups their event ids
// (from Nats-Msg-Id, controller.id) by controller. Each read is retried: right after a server
// of the cluster came back, a request may find no responder for a moment.
func readStream(t *testing.T, js jetstream.JetStream, stream string, n int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		var m *jetstream.RawStreamMsg
		testutil.EventuallyNil(t, 20*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			m, err = s.GetMsg(ctx, seq)
			return err
		}, "message %d of stream %s", seq, stream)
		ctrl, id, ok := strings.Cut(m.Header.Get(nats.MsgIdHdr), ".")
		if !ok {
			t.Fatalf("message %d without a controller.id Nats-Msg-Id: %q", seq, m.Header.Get(nats.MsgIdHdr))
		}
		out[ctrl] = append(out[ctrl], id)
	}
	return out
}

// exactlyOnceInOrder compares what the stream holds for a controller with what was created.
func exactlyOnceInOrder(t *testing.T, controller string, want, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	var missing, doubled []string
	for _, id := range want {
		switch seen[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			doubled = append(doubled, id)
		}
	}
	if len(missing) > 0 || len(doubled) > 0 || len(got) != len(want) {
		t.Errorf("%s: %d created, %d on the stream; missing %d (first %v), doubled %d (first %v)",
			controller, len(want), len(got), len(missing), first(missing), len(doubled), first(doubled))
		return
	}
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("%s: every event once, but not in the order created: from #%d created %v, on the stream %v (created as #%d)",
				controller, i, want[i:min(i+6, len(want))], got[i:min(i+6, len(got))], slices.Index(want, got[i]))
			return
		}
	}
}

func first(s []string) []string { return s[:min(len(s), 3)] }
