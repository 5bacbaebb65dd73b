package e2e

// The large fleet benchmark's rig (make bench-fleet): its size and pace from the environment,
// the replicas by slot and generation, the CPU and memory of every process, the arrival of
// events on the stream, and waits that report instead of failing.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// fleetPlan is the size and pace of a large fleet run: 500 controllers of 100 VMs on ten
// replicas unless the environment says otherwise (VEIL_FLEET_CONTROLLERS, VEIL_FLEET_VMS,
// VEIL_FLEET_REPLICAS, VEIL_FLEET_LEASE_TTL, VEIL_FLEET_INTERVAL, VEIL_FLEET_POLL,
// VEIL_FLEET_FEED, VEIL_FLEET_SOLO=0 to skip the one-exporter window, VEIL_FLEET_OUTAGE).
type fleetPlan struct {
	controllers, vms, replicas int
	ttl, interval, poll        time.Duration
	feed                       time.Duration // one event to every controller each feed period
	outage                     time.Duration // the whole NATS cluster down
	solo                       bool
}

func fleetPlanFromEnv(b *testing.B) fleetPlan {
	p := fleetPlan{controllers: 500, vms: 100, replicas: 10, ttl: 15 * time.Second, interval: 15 * time.Second,
		poll: 5 * time.Second, feed: 5 * time.Second, outage: 30 * time.Second, solo: true}
	for _, v := range []struct {
		env string
		n   *int
	}{{"VEIL_FLEET_CONTROLLERS", &p.controllers}, {"VEIL_FLEET_VMS", &p.vms}, {"VEIL_FLEET_REPLICAS", &p.replicas}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: a positive count", v.env, s)
			}
			*v.n = n
		}
	}
	for _, v := range []struct {
		env string
		d   *time.Duration
	}{{"VEIL_FLEET_LEASE_TTL", &p.ttl}, {"VEIL_FLEET_INTERVAL", &p.interval}, {"VEIL_FLEET_POLL", &p.poll},
		{"VEIL_FLEET_FEED", &p.feed}, {"VEIL_FLEET_OUTAGE", &p.outage}} {
		if s := os.Getenv(v.env); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				b.Fatalf("%s=%q: a positive duration", v.env, s)
			}
			*v.d = d
		}
	}
	p.solo = os.Getenv("VEIL_FLEET_SOLO") != "0"
	return p
}

// fleetReplicas are the replicas of a run by slot, as a Deployment's pods: a restarted slot
// runs a new pod with a new name (slot-generation), as a Deployment's does.
type fleetReplicas struct {
	b                         *testing.B
	plan                      fleetPlan
	dir, exporter, ctrls, nat string
	gen                       []int
	procs                     []*replicaProc
}

// name is the instance name of slot's current generation.
func (r *fleetReplicas) name(slot int) string {
	if r.gen[slot] == 0 {
		return fmt.Sprintf("r%02d", slot)
	}
	return fmt.Sprintf("r%02d-%d", slot, r.gen[slot])
}

// insts are the names of the current generation of every slot.
func (r *fleetReplicas) insts() []string {
	out := make([]string, len(r.procs))
	for i := range r.procs {
		out[i] = r.name(i)
	}
	return out
}

// start runs slot as a new pod (a new generation after the first) and waits for /-/healthy.
func (r *fleetReplicas) start(slot int) {
	if r.procs[slot] != nil {
		r.gen[slot]++
	}
	r.procs[slot] = r.proc(r.name(slot))
	r.procs[slot].start()
}

// bySlot finds the slot whose current pod is inst (-1: none).
func (r *fleetReplicas) bySlot(inst string) int {
	return slices.Index(r.insts(), inst)
}

// proc is the replica inst (not started) with the plan's lease time and pace; killed at the
// end if it runs.
func (r *fleetReplicas) proc(inst string) *replicaProc {
	cfg := filepath.Join(r.dir, inst+".yaml")
	body := "controllers:\n" + r.ctrls +
		fmt.Sprintf("collect:\n  interval: %s\nguest:\n  enabled: false\n", r.plan.interval) +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: %s\n  start: earliest\n  checkpoint: {store: nats_kv}\n", r.plan.poll) +
		fmt.Sprintf("nats:\n  url: %q\n  jetstream: {stream: %s}\n", r.nat, fleetStream) +
		fmt.Sprintf("ha:\n  enabled: true\n  instance: %s\n  lease_ttl: %s\n  replicas: 3\n", inst, r.plan.ttl)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		r.b.Fatal(err)
	}
	p := &replicaProc{t: r.b, bin: r.exporter, cfg: cfg, web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(r.b)), logPath: filepath.Join(r.dir, inst+".log"),
		startWait: 90 * time.Second}
	r.b.Cleanup(func() {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// running are the processes of the slots whose pod runs.
func (r *fleetReplicas) running() []*replicaProc {
	var out []*replicaProc
	for _, p := range r.procs {
		if p != nil && p.cmd != nil && p.cmd.ProcessState == nil {
			out = append(out, p)
		}
	}
	return out
}

// usage is the CPU time of a set of processes at one instant.
type usage struct {
	at  time.Time
	cpu map[int]time.Duration
}

func sampleCPU(b *testing.B, pids ...int) usage {
	u := usage{at: time.Now(), cpu: map[int]time.Duration{}}
	for _, pid := range pids {
		if pid != 0 {
			u.cpu[pid] = cpuTime(b, pid)
		}
	}
	return u
}

// cores is the CPU pid used between u and later, in cores (0 when either does not know it).
func (u usage) cores(later usage, pid int) float64 {
	a, ok1 := u.cpu[pid]
	z, ok2 := later.cpu[pid]
	if !ok1 || !ok2 {
		return 0
	}
	return (z - a).Seconds() / later.at.Sub(u.at).Seconds()
}

// sum is the CPU of the processes pids between u and later, in cores.
func (u usage) sum(later usage, pids ...int) float64 {
	t := 0.0
	for _, pid := range pids {
		t += u.cores(later, pid)
	}
	return t
}

// natsPids are the pids of the running cluster nodes.
func natsPids(c *testutil.Cluster) []int {
	var out []int
	for _, n := range c.Nodes {
		if pid := n.Pid(); pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// arrivalWatch records when each controller's events reach the stream, from a consumer of new
// messages: the longest gap of a controller is its longest forwarding pause.
type arrivalWatch struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func watchArrivals(b *testing.B, js jetstream.JetStream) *arrivalWatch {
	w := &arrivalWatch{at: map[string][]time.Time{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, fleetStream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ctrl, _, _ := strings.Cut(m.Headers().Get(nats.MsgIdHdr), ".")
		w.mu.Lock()
		w.at[ctrl] = append(w.at[ctrl], time.Now())
		w.mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
	return w
}

// longestGap is, for every controller, the longest time between two arrivals of its events
// within [from, to] (the edges count as arrivals), and the controller with the longest.
func (w *arrivalWatch) longestGap(names []string, from, to time.Time) (worst time.Duration, who string, each map[string]time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	each = map[string]time.Duration{}
	for _, n := range names {
		last := from
		var g time.Duration
		for _, t := range w.at[n] {
			if t.Before(from) || t.After(to) {
				continue
			}
			g, last = max(g, t.Sub(last)), t
		}
		g = max(g, to.Sub(last))
		each[n] = g
		if g > worst {
			worst, who = g, n
		}
	}
	return worst, who, each
}

// waitStableFor is waitStable that reports instead of failing: whether within limit every
// controller came to be held by one of insts, each holding at least floor, with no holder
// changing for quiet, and when the last change was.
func (w *leaseWatch) waitStableFor(quiet, limit time.Duration, insts []string, floor int) (bool, time.Time) {
	deadline := time.Now().Add(limit)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		o := w.owners()
		ok := len(o) == w.want
		for _, i := range o {
			ok = ok && slices.Contains(insts, i)
		}
		count := w.counts()
		for _, i := range insts {
			ok = ok && count[i] >= floor
		}
		if ok && time.Since(w.lastChange()) >= quiet {
			return true, w.lastChange()
		}
	}
	return false, w.lastChange()
}

// moves counts, per controller, how often its lease went to a holder other than the one
// before (a lease deleted and taken again by the same holder is no move) after t.
func (w *leaseWatch) moves(t time.Time) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, prev := map[string]int{}, map[string]string{}
	for _, c := range w.changes {
		if c.to == "" {
			continue
		}
		if p, ok := prev[c.controller]; ok && p != c.to && c.at.After(t) {
			out[c.controller]++
		}
		prev[c.controller] = c.to
	}
	return out
}

// writtenSince says whether every controller's lease record was written after t.
func (w *leaseWatch) writtenSince(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ct := range w.holder {
		if !w.written[ct].After(t) {
			return false
		}
	}
	return len(w.holder) == w.want
}

// kvWrites is the last sequence of the lease bucket's stream: writes so far.
func kvWrites(js jetstream.JetStream) uint64 {
	info := streamInfo(js, "KV_VEIL_EXPORTER_LEASES")
	if info == nil {
		return 0
	}
	return info.State.LastSeq
}
