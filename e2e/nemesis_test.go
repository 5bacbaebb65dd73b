// The nemesis, as Jepsen runs one: a seeded, randomized schedule of composed faults over a
// 3-node NATS cluster, three exporter replicas and six controllers with events flowing, judged
// on the whole stream and on what a live subscriber saw while it happened.

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// nemesisDuration is how long faults are made: VEIL_NEMESIS_DURATION (make faults: 30m), 40 s in
// make test.
func nemesisDuration(t *testing.T) time.Duration {
	if s := os.Getenv("VEIL_NEMESIS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("VEIL_NEMESIS_DURATION: %v", err)
		}
		return d
	}
	return 40 * time.Second
}

// nemesisSeed is VEIL_NEMESIS_SEED (to replay a schedule); else the clock for a run of
// VEIL_NEMESIS_DURATION (make faults explores new schedules), and seed 1 in make test, whose
// short schedule is then the same on every machine (its timing still varies).
func nemesisSeed(t *testing.T) uint64 {
	if s := os.Getenv("VEIL_NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VEIL_NEMESIS_SEED: %v", err)
		}
		return v
	}
	if os.Getenv("VEIL_NEMESIS_DURATION") != "" {
		return uint64(time.Now().UnixNano())
	}
	return 1
}

// fault is one entry of the schedule: what, on what, from when, for how long. Its class says
// which faults may not overlap: one fault at a time on a NATS node or its links (a majority of
// the cluster stays up), one per replica, one per controller.
type fault struct {
	kind, target string
	class        string
	at, dur      time.Duration
}

func (f fault) String() string {
	return fmt.Sprintf("%6.1fs +%4.1fs %-14s %s", f.at.Seconds(), f.dur.Seconds(), f.kind, f.target)
}

type nemesisKind struct {
	kind, class  string
	minD, spread time.Duration
}

var nemesisKinds = []nemesisKind{
	{"kill-replica", "replica", time.Second, 6 * time.Second},
	{"pause-replica", "replica", time.Second, 7 * time.Second}, // past the 3 s lease sometimes
	{"kill-nats", "nats", time.Second, 5 * time.Second},
	{"pause-nats", "nats", time.Second, 5 * time.Second},
	{"isolate-nats", "nats", 2 * time.Second, 5 * time.Second},
	{"one-way-nats", "nats", 2 * time.Second, 5 * time.Second},
	{"half-open-nats", "nats", 2 * time.Second, 5 * time.Second},
	{"slow-nats", "nats", 2 * time.Second, 5 * time.Second},
	{"controller-5xx", "controller", time.Second, 5 * time.Second},
	{"controller-timeout", "controller", 2 * time.Second, 6 * time.Second},
	{"token-revoked", "controller", time.Second, 5 * time.Second},
}

// schedule draws faults for d from seed: a new one every 1 to 4 s, on a target of its class that
// is free then (NATS targets: "leader" means the stream's leader when the fault starts).
func schedule(seed uint64, d time.Duration, replicas, controllers []string) []fault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	busyUntil := map[string]time.Duration{} // by target ("nats" for the whole cluster)
	kinds := nemesisKinds
	var out []fault
	for at := 2 * time.Second; at < d; at += time.Second + time.Duration(rng.Int64N(int64(3*time.Second))) {
		k := kinds[rng.IntN(len(kinds))]
		f := fault{kind: k.kind, class: k.class, at: at, dur: k.minD + time.Duration(rng.Int64N(int64(k.spread)))}
		var pool []string
		switch k.class {
		case "replica":
			pool = replicas
		case "controller":
			pool = controllers
		case "nats":
			pool = []string{"leader", "n0", "n1", "n2"}
		}
		f.target = pool[rng.IntN(len(pool))]
		key := f.target
		if k.class == "nats" {
			key = "nats"
		}
		if busyUntil[key] > at {
			continue
		}
		if k.class == "replica" { // one replica always runs
			down := 0
			for _, r := range replicas {
				if busyUntil[r] > at {
					down++
				}
			}
			if down >= len(replicas)-1 {
				continue
			}
		}
		busyUntil[key] = at + f.dur + time.Second // a second to recover before the next
		out = append(out, f)
	}
	return out
}

// TestNemesis runs a random schedule of composed faults and judges the stream and a live
// subscriber: each journal event once, in order per controller, nothing lost. A failure prints
// the seed and the schedule: VEIL_NEMESIS_SEED replays it.
func TestNemesis(t *testing.T) {
	seed, dur := nemesisSeed(t), nemesisDuration(t)
	cluster := testutil.StartCluster(t, testutil.Partitionable())
	dir := t.TempDir()
	bin := testutil.Build(t, "cmd/veil-exporter")
	const token, stream = "nemesis-token", "VEIL_EVENTS"
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(token), 0o600)

	names := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
	sims := map[string]*veiltest.Server{}
	var ctrls strings.Builder
	for i, n := range names {
		sim := veiltest.New(veiltest.Options{Seed: int64(i + 1), Token: token, VMs: 3, InitialEvents: -1, InitialTasks: -1, EventsOrder: "oldest_first"})
		t.Cleanup(sim.Close)
		sims[n] = sim
		fmt.Fprintf(&ctrls, "  - name: %s\n    url: %s\n    token_file: %s\n    timeout: 2s\n", n, sim.URL, tok)
	}
	replicas := []string{"r1", "r2", "r3"}
	procs := startNemesisReplicas(t, replicas, bin, dir, ctrls.String(), cluster.ClientURLs(), stream)
	testutil.Eventually(t, 60*time.Second, func() bool { return oneOwnerEach(procs, names) }, "every controller run by one replica")

	// Events flow on every controller for the whole run.
	stopFeed, fed := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	created := map[string][]string{}
	go func() {
		defer close(fed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopFeed:
				return
			case <-tick.C:
			}
			mu.Lock()
			for _, n := range names {
				created[n] = append(created[n], sims[n].AddEvents(2, veiltest.EventSpec{})...)
			}
			mu.Unlock()
		}
	}()
	live := startLiveSubscriber(t, cluster.URLs(), stream)

	plan := schedule(seed, dur, replicas, names)
	logScheduleOnFailure(t, seed, dur, plan)
	n := &nemesis{t: t, cluster: cluster, procs: procs, sims: sims, stopped: map[string]func(){}}
	n.run(plan)

	// The end: every fault healed, the feed stopped; every event of every journal must reach
	// the stream once, in order, and the live subscriber must have seen the same.
	n.healAll()
	close(stopFeed)
	<-fed
	testutil.Eventually(t, 60*time.Second, func() bool { return oneOwnerEach(procs, names) }, "every controller run by one replica after the faults")
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, ids := range created {
		total += len(ids)
	}
	// The waits below end as soon as what they wait for holds; their bounds say when it surely
	// will not (a catch-up after the faults and reading the whole stream under the race
	// detector on a busy machine take what they take), not how fast this machine is.
	js := cluster.JetStream(t)
	testutil.Eventually(t, 5*time.Minute, func() bool { return streamCount(t, js, stream) >= total }, "the %d events on the stream", total)
	whole := readAll(t, cluster.URLs(), stream)
	testutil.Eventually(t, 3*time.Minute, func() bool { return live.count() >= len(whole.order) }, "the live subscriber to read the whole stream")
	seen := live.snapshot()

	nemesisVerdict(t, seed, dur, plan, procs, names, created, whole.ids, seen)
}

// nemesisVerdict prints the run's table (faults, conflicts, adoptions, and per controller what the stream and the live subscriber hold against the journal) and fails when an event was lost, repeated or out of order.
func nemesisVerdict(t *testing.T, seed uint64, dur time.Duration, plan []fault, procs map[string]*replicaProc, names []string, created, streamed, seen map[string][]string) {
	t.Helper()
	conflicts, adoptions := 0.0, 0.0
	for _, p := range procs {
		conflicts += metricSum(p, "veil_events_publish_conflicts_total")
		adoptions += metricSum(p, "veil_events_position_adoptions_total")
	}
	kinds := map[string]int{}
	for _, f := range plan {
		kinds[f.kind]++
	}
	var kl []string
	for k, c := range kinds {
		kl = append(kl, fmt.Sprintf("%s %d", k, c))
	}
	sort.Strings(kl)
	var table strings.Builder
	fmt.Fprintf(&table, "NEMESIS seed %d, %s, %d faults: %s; of the replicas' last runs: publish conflicts %.0f, positions adopted %.0f\n", seed, dur, len(plan), strings.Join(kl, ", "), conflicts, adoptions)
	fmt.Fprintf(&table, "%-10s | %7s | %-36s | %-36s\n", "controller", "journal", "stream: ok / lost / dup / disorder", "live subscriber: ok / lost / dup / disorder")
	bad := false
	for _, c := range names {
		s := classify(created[c], streamed[c])
		l := classify(created[c], seen[c])
		fmt.Fprintf(&table, "%-10s | %7d | %6d / %4d / %3d / %8d      | %6d / %4d / %3d / %8d\n", c, len(created[c]),
			s.ok, len(s.lost), len(s.duplicated), len(s.outOfOrder)+len(s.foreign), l.ok, len(l.lost), len(l.duplicated), len(l.outOfOrder)+len(l.foreign))
		bad = bad || !s.clean() || !l.clean()
	}
	t.Log("\n" + table.String())
	if bad {
		t.Errorf("events lost, repeated or out of order:\n%s", table.String())
	}
}

// nemesis applies a schedule.
type nemesis struct {
	t       *testing.T
	cluster *testutil.Cluster
	procs   map[string]*replicaProc
	sims    map[string]*veiltest.Server
	stopped map[string]func() // by fault: how to end it
}

// run applies each fault at its time and ends it after its duration, from the test's goroutine
// (restarting a process waits until it answers: later actions may run late, never early).
func (n *nemesis) run(plan []fault) {
	type action struct {
		at    time.Duration
		start bool
		i     int
	}
	var acts []action
	for i, f := range plan {
		acts = append(acts, action{f.at, true, i}, action{f.at + f.dur, false, i})
	}
	sort.SliceStable(acts, func(a, b int) bool { return acts[a].at < acts[b].at })
	begin := time.Now()
	for _, a := range acts {
		if d := time.Until(begin.Add(a.at)); d > 0 {
			time.Sleep(d) // the schedule's clock: nothing waits on another goroutine here
		}
		key := strconv.Itoa(a.i)
		if a.start {
			n.stopped[key] = n.start(plan[a.i])
		} else if stop := n.stopped[key]; stop != nil {
			stop()
			delete(n.stopped, key)
		}
	}
}

// node resolves a NATS target: "leader" is the stream's leader now (a node at random if none).
func (n *nemesis) node(target string) *testutil.NATS {
	if target == "leader" {
		if l := n.cluster.StreamLeader("VEIL_EVENTS"); l != nil {
			return l
		}
		target = "n0"
	}
	i, _ := strconv.Atoi(strings.TrimPrefix(target, "n"))
	return n.cluster.Nodes[i]
}

// start applies f and returns what ends it.
func (n *nemesis) start(f fault) func() {
	switch f.kind {
	case "kill-replica":
		p := n.procs[f.target]
		p.signal(syscall.SIGKILL)
		p.wait()
		return p.start
	case "pause-replica":
		p := n.procs[f.target]
		p.signal(syscall.SIGSTOP)
		return func() { p.signal(syscall.SIGCONT) }
	case "kill-nats":
		node := n.node(f.target)
		node.Kill()
		return node.Start
	case "pause-nats":
		node := n.node(f.target)
		if err := node.Signal(syscall.SIGSTOP); err != nil {
			n.t.Fatal(err)
		}
		return func() { _ = node.Signal(syscall.SIGCONT) }
	case "isolate-nats":
		n.cluster.Isolate(n.node(f.target))
		return n.cluster.HealAll
	case "one-way-nats", "half-open-nats", "slow-nats":
		node := n.node(f.target)
		for _, o := range n.cluster.Nodes {
			if o == node {
				continue
			}
			out, in := n.cluster.RouteLink(node, o), n.cluster.RouteLink(o, node)
			switch f.kind {
			case "one-way-nats": // what node sends is lost; what it receives arrives
				out.Drop(testutil.Forward)
				in.Drop(testutil.Back)
			case "half-open-nats": // the connections stay up, nothing passes either way
				for _, l := range []*testutil.Link{out, in} {
					l.Drop(testutil.Forward)
					l.Drop(testutil.Back)
				}
			case "slow-nats":
				out.Delay(150 * time.Millisecond)
				in.Delay(150 * time.Millisecond)
			}
		}
		if f.kind == "slow-nats" {
			n.cluster.ClientLink(node).Delay(150 * time.Millisecond)
		}
		return n.cluster.HealAll
	case "controller-5xx":
		sim := n.sims[f.target]
		sim.SetFaults(veiltest.Fault{Kind: "status", Status: 503, Rate: 0.5})
		return sim.ClearFaults
	case "controller-timeout":
		sim := n.sims[f.target]
		sim.SetFaults(veiltest.Fault{Kind: "latency", Latency: 3 * time.Second, Rate: 0.5})
		return sim.ClearFaults
	case "token-revoked":
		sim := n.sims[f.target]
		sim.SetFaults(veiltest.Fault{Kind: "status", Status: 401})
		return sim.ClearFaults
	}
	n.t.Fatalf("unknown fault %s", f.kind)
	return nil
}

// healAll ends every fault still on (a schedule ends with none, but a run cut short may not).
func (n *nemesis) healAll() {
	for k, stop := range n.stopped {
		stop()
		delete(n.stopped, k)
	}
	n.cluster.HealAll()
}

// streamRead is a stream's messages read in sequence order: event ids by controller.
type streamRead struct {
	order []uint64
	ids   map[string][]string
}

// liveSubscriber reads the stream from the start for the whole run with an ordered consumer, as
// a subscriber does, keeping each stream sequence once.
type liveSubscriber struct {
	mu   sync.Mutex
	seqs map[uint64]bool
	ids  map[string][]string
}

func (l *liveSubscriber) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seqs)
}

func (l *liveSubscriber) snapshot() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for k, v := range l.ids {
		out[k] = slices.Clone(v)
	}
	return out
}

func startLiveSubscriber(t *testing.T, urls, stream string) *liveSubscriber {
	t.Helper()
	l := &liveSubscriber{seqs: map[uint64]bool{}, ids: map[string][]string{}}
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var c jetstream.Consumer
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		c, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
		return err
	}, "an ordered consumer on %s", stream)
	cc, err := c.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		ctrl, id, _ := strings.Cut(m.Headers().Get(nats.MsgIdHdr), ".")
		l.mu.Lock()
		if !l.seqs[md.Sequence.Stream] {
			l.seqs[md.Sequence.Stream] = true
			l.ids[ctrl] = append(l.ids[ctrl], id)
		}
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// readAll reads the whole stream in sequence order.
func readAll(t *testing.T, urls, stream string) streamRead {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Right after the schedule's last fault healed, the cluster may answer "JetStream system
	// temporarily unavailable" (503, 10008) for a moment: the set-up is retried, as readStream's
	// reads are.
	// Each attempt has its own deadline: a request that no node answers while the stream's
	// leader is elected again must not spend the whole wait.
	var info *jetstream.StreamInfo
	var c jetstream.Consumer
	testutil.EventuallyNil(t, 3*time.Minute, func() error {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		s, err := js.Stream(actx, stream)
		if err != nil {
			return err
		}
		if info, err = s.Info(actx); err != nil {
			return err
		}
		c, err = js.OrderedConsumer(actx, stream, jetstream.OrderedConsumerConfig{})
		return err
	}, "the stream %s to read", stream)
	r := streamRead{ids: map[string][]string{}}
	for uint64(len(r.order)) < info.State.Msgs {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d messages of %s: %v", len(r.order), info.State.Msgs, stream, err)
			}
			continue // a moment of unavailability, as at the set-up
		}
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			ctrl, id, _ := strings.Cut(m.Headers().Get(nats.MsgIdHdr), ".")
			r.order = append(r.order, md.Sequence.Stream)
			r.ids[ctrl] = append(r.ids[ctrl], id)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages of %s", len(r.order), info.State.Msgs, stream)
		}
	}
	return r
}

var metricLineRE = regexp.MustCompile(`(?m)^(\w+)(?:\{[^}]*\})? ([0-9.e+-]+)$`)

// metricSum sums a family's series on a replica's /metrics (0 when it does not answer).
func metricSum(p *replicaProc, name string) float64 {
	_, body, err := httpGet("http://" + p.web + "/metrics")
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, m := range metricLineRE.FindAllStringSubmatch(string(body), -1) {
		if m[1] == name {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// startNemesisReplicas starts a replica of each name in replicas, with the controllers ctrls
// (YAML entries), events and HA on the cluster at clientURLs; each ends with the test.
func startNemesisReplicas(t *testing.T, replicas []string, bin, dir, ctrls, clientURLs, stream string) map[string]*replicaProc {
	procs := map[string]*replicaProc{}
	for _, inst := range replicas {
		cfg := filepath.Join(dir, inst+".yaml")
		body := "controllers:\n" + ctrls +
			"collect:\n  interval: 1s\nguest:\n  enabled: false\n" +
			"events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: nats_kv}\n" +
			fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s, duplicate_window: 1s}\n", clientURLs, stream) +
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

// logScheduleOnFailure logs, when the test fails, the seed and the schedule of faults, with how
// to replay them.
func logScheduleOnFailure(t *testing.T, seed uint64, dur time.Duration, plan []fault) {
	report := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "nemesis seed %d (replay: VEIL_NEMESIS_SEED=%d VEIL_NEMESIS_DURATION=%s), schedule:\n", seed, seed, dur)
		for _, f := range plan {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		return b.String()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(report())
		}
	})
}
