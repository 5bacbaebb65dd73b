package ha

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

var seven = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"}

func TestControllersSpreadOverReplicasOneHolderEach(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven)
	a, b, d := w.start("pod-a", nil), w.start("pod-b", nil), w.start("pod-c", nil)
	w.waitConverged(20*time.Second, a, b, d)

	// The metrics say the same: one veil_ha_leader 1 per controller across replicas, three instances.
	leaders := map[string]float64{}
	for _, r := range []*replica{a, b, d} {
		testutil.Eventually(t, 5*time.Second, func() bool { return gauge(t, r.c, "veil_ha_instances", "") == 3 }, "%s to see 3 instances", r.name)
		for _, ct := range seven {
			leaders[ct] += gauge(t, r.c, "veil_ha_leader", ct)
		}
	}
	for _, ct := range seven {
		if leaders[ct] != 1 {
			t.Errorf("sum of veil_ha_leader{controller=%q} over replicas = %v, want 1", ct, leaders[ct])
		}
	}
	// Every replica's status page names the same owner per controller.
	testutil.Eventually(t, 5*time.Second, func() bool {
		own := w.owners(a, b, d)
		for _, r := range []*replica{a, b, d} {
			st := r.c.Status()
			if len(st.Instances) != 3 || len(st.Controllers) != len(seven) {
				return false
			}
			for _, cs := range st.Controllers {
				if cs.Owner != own[cs.Controller][0] || cs.Since.IsZero() || cs.Mine != (cs.Owner == r.name) {
					return false
				}
			}
		}
		return true
	}, "status of every replica to show the owners")
}

// gauge reads one series of c; label is the controller ("" for none).
func gauge(t *testing.T, c prometheus.Collector, name, controller string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if controller == "" || labelValue(m, "controller") == controller {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestCloseHandsOverAtOnce: Close deletes every lease, so the others take them without
// waiting for them to run out. With lease_ttl 20 s the move within half of it cannot be expiry,
// whatever this machine's speed.
func TestCloseHandsOverAtOnce(t *testing.T) {
	const ttl = 20 * time.Second
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven)
	long := func(o *testOptions) { o.LeaseTTL = ttl }
	a, b, d := w.start("pod-a", long), w.start("pod-b", long), w.start("pod-c", long)
	w.waitConverged(4*ttl, a, b, d)
	mine := w.held(a)
	w.resetGaps()

	start := time.Now()
	a.c.Close() // SIGTERM
	// Expiry takes lease_ttl: a move within half of it was a hand-over.
	testutil.Eventually(t, ttl/2, func() bool { return w.heldBy(mine, b, d) }, "%v to move to the others before their leases could run out", mine)
	t.Logf("hand-over of %d controllers after Close: %v (lease_ttl %v)", len(mine), time.Since(start), ttl)
	if a.released[mine[0]] == 0 {
		t.Error("Close did not call OnRelease")
	}
	w.waitConverged(10*time.Second, b, d)
}

// TestKilledReplicaControllersMoveWithinLeaseTTL: a killed replica's leases are taken once they
// ran out (world.acquired: never while still valid), and the survivors look again at that
// instant: the move comes within lease_ttl of the kill plus a renew period (the last renewal
// was at most one before the kill), with lease_ttl 6 s. How soon on this machine is
// BenchmarkPausedOwnerTakeOver's figure.
func TestKilledReplicaControllersMoveWithinLeaseTTL(t *testing.T) {
	const ttl = 6 * time.Second
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven)
	opt := func(o *testOptions) { o.LeaseTTL = ttl }
	a, b, d := w.start("pod-a", opt), w.start("pod-b", opt), w.start("pod-c", opt)
	w.waitConverged(4*ttl, a, b, d)
	mine := w.held(a)

	start := time.Now()
	a.cancel() // stops renewing and releases nothing in the bucket, like a killed process
	<-a.done
	testutil.Eventually(t, ttl+ttl/3, func() bool { return w.heldBy(mine, b, d) }, "%v to move to the others within lease_ttl and a renew period", mine)
	t.Logf("take-over of %d controllers of a killed replica: %v (lease_ttl %v, renew period %v)", len(mine), time.Since(start), ttl, ttl/3)
	w.waitConverged(4*ttl, b, d)
}

// TestKilledReplicaMovesOnlyItsControllers kills one of three replicas (no release, as kill
// -9): its controllers move to the survivors, evenly, and no controller a survivor held changes
// owner, not even for a moment (make demo-ha showed one of a live replica moving).
func TestKilledReplicaMovesOnlyItsControllers(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), names("ctl", 30)) // with 15, bounded rendezvous hashing alone happened to move none
	a, b, d := w.start("pod-a", nil), w.start("pod-b", nil), w.start("pod-c", nil)
	w.waitConverged(30*time.Second, a, b, d)
	before := map[string]string{}
	for ct, o := range w.owners(a, b, d) {
		before[ct] = o[0]
	}
	mine := w.held(a)
	w.mu.Lock()
	released := map[*replica]map[string]int{b: maps.Clone(b.released), d: maps.Clone(d.released)}
	w.mu.Unlock()

	a.cancel() // stops renewing and releases nothing in the bucket, like a killed process
	<-a.done
	testutil.Eventually(t, 10*time.Second, func() bool { return w.heldBy(mine, b, d) }, "%v to move to the others", mine)
	w.waitConverged(10*time.Second, b, d)
	for ct, o := range w.owners(b, d) {
		if was := before[ct]; was != "pod-a" && o[0] != was {
			t.Errorf("%s moved from %s, which is alive, to %s", ct, was, o[0])
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range []*replica{b, d} {
		for ct, n := range r.released {
			if n != released[r][ct] {
				t.Errorf("%s released %s after the kill; a survivor keeps what it holds", r.name, ct)
			}
		}
	}
}

func TestJoiningReplicaTakesItsShareOneAtATime(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven)
	a, b := w.start("pod-a", nil), w.start("pod-b", nil)
	w.waitConverged(20*time.Second, a, b)
	before := map[string]string{}
	for ct, o := range w.owners(a, b) {
		before[ct] = o[0]
	}
	w.resetGaps()

	start := time.Now()
	d := w.start("pod-c", nil)
	w.waitConverged(20*time.Second, a, b, d)
	t.Logf("join converged in %v", time.Since(start))

	w.mu.Lock()
	gap, unowned := w.maxGap, w.maxUnowned
	w.mu.Unlock()
	t.Logf("while joining: longest gap %v, most controllers unowned at once %d", gap, unowned)
	if unowned > 1 {
		t.Errorf("%d controllers were without an owner at once; they must move one at a time", unowned)
	}
	// Each moved by a hand-over (its lease deleted for the receiver), none by running out.
	logs := w.logs.String()
	if n := strings.Count(logs, `why="handed over to pod-c"`); n != len(w.held(d)) {
		t.Errorf("%d hand-overs to pod-c, which holds %v", n, w.held(d))
	}
	if strings.Contains(logs, "expired: not renewed in time") {
		t.Error("a lease ran out while pod-c joined")
	}
	moved := 0
	for ct, o := range w.owners(a, b, d) {
		if o[0] != before[ct] {
			moved++
			if o[0] != "pod-c" {
				t.Errorf("%s moved from %s to %s, not to the new replica", ct, before[ct], o[0])
			}
		}
	}
	if moved != len(w.held(d)) || moved < 2 {
		t.Errorf("%d controllers moved, the new replica holds %v", moved, w.held(d))
	}
}

func TestPausedOwnerStopsBeforeTakeoverAndNeverRenewsOverIt(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven[:4])
	var (
		pauseMu sync.Mutex
		paused  chan struct{} // non-nil: the loop blocks until it is closed
	)
	a := w.start("pod-a", func(o *testOptions) {
		o.beforeTick = func() {
			pauseMu.Lock()
			p := paused
			pauseMu.Unlock()
			if p != nil {
				<-p
			}
		}
	})
	b := w.start("pod-b", nil)
	w.waitConverged(20*time.Second, a, b)
	var leases []*Lease
	for _, ct := range w.held(a) {
		leases = append(leases, a.c.Lease(ct))
	}

	resume := make(chan struct{})
	pauseMu.Lock()
	paused = resume
	pauseMu.Unlock()
	start := time.Now()
	// The paused holder's own clock ends its leases before the other replica may take them
	// (world.acquired records it as a violation otherwise).
	testutil.Eventually(t, 10*time.Second, func() bool { return w.heldBy(w.ctrls, b) }, "pod-b to take every controller")
	t.Logf("take-over from a paused owner: %v", time.Since(start))
	for _, l := range leases {
		if l.Held() {
			t.Errorf("lease of %s: still held while paused past lease_ttl", l.Controller())
		}
	}
	// Its own clock ends them a lease_ttl after they ran out, paused or not.
	for _, l := range leases {
		select {
		case <-l.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("lease of %s: context not cancelled a lease_ttl after it ran out", l.Controller())
		}
	}

	pauseMu.Lock()
	paused = nil
	pauseMu.Unlock()
	close(resume) // SIGCONT
	testutil.Eventually(t, 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range leases {
			if a.released[l.Controller()] == 0 {
				return false
			}
		}
		return true
	}, "the resumed replica to let its old leases go")
	// Back among the live, it gets its share by hand-over, never by writing over pod-b.
	w.waitConverged(20*time.Second, a, b)
	for _, l := range leases {
		if l.Valid() {
			t.Errorf("old lease of %s became valid again", l.Controller())
		}
	}
	if logs := w.logs.String(); strings.Contains(logs, "lost: another replica took it") {
		t.Errorf("a lease was written over:\n%s", logs)
	}
}

func TestLeaseTakenFromUnderTheHolderIsLetGo(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), []string{"alpha"})
	a := w.start("pod-a", nil)
	testutil.Eventually(t, 10*time.Second, func() bool { return a.c.Lease("alpha") != nil }, "pod-a to hold alpha")
	l := a.c.Lease("alpha")

	// Someone else writes the key: the holder's next renewal fails its compare-and-set.
	kv := bucket(t, w)
	b, _ := json.Marshal(leaseRecord{Instance: "intruder", Controller: "alpha", ID: "x"})
	if _, err := kv.Put(context.Background(), leaseKey("alpha"), b); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return a.released["alpha"] == 1
	}, "pod-a to let alpha go")
	if l.Valid() {
		t.Error("the lease stayed valid")
	}
	// The intruder never renews: after lease_ttl pod-a takes alpha again.
	testutil.Eventually(t, 3*testTTL, func() bool { return a.c.Lease("alpha") != nil }, "pod-a to take alpha back")
	if nl := a.c.Lease("alpha"); nl.Token() <= l.Token() {
		t.Errorf("token %d of the new lease is not above %d", nl.Token(), l.Token())
	}
}

func bucket(t *testing.T, w *world) jetstream.KeyValue {
	t.Helper()
	kv, err := testutil.JetStream(t, w.urls).KeyValue(context.Background(), w.bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func TestStreamLeaderLossKeepsOneHolder(t *testing.T) {
	c := testutil.StartCluster(t)
	w := newWorld(t, c.URLs(), seven[:6])
	a, b, d := w.start("pod-a", nil), w.start("pod-b", nil), w.start("pod-c", nil)
	w.waitConverged(20*time.Second, a, b, d)

	var leader *testutil.NATS
	testutil.Eventually(t, 10*time.Second, func() bool { leader = c.StreamLeader("KV_" + w.bucket); return leader != nil },
		"a leader of the KV stream")
	w.resetGaps()
	start := time.Now()
	leader.Stop()
	testutil.Eventually(t, 20*time.Second, func() bool {
		l := c.StreamLeader("KV_" + w.bucket)
		return l != nil && l != leader
	}, "a new leader of the KV stream")
	t.Logf("new stream leader after %v", time.Since(start))
	// Leases are kept or move, never held twice (world.acquired checks every acquisition), and
	// every controller has an owner again. A lease still valid two lease times after the stop
	// was renewed through the new leader.
	testutil.Eventually(t, 30*time.Second, func() bool {
		return time.Since(start) > 2*testTTL && w.heldBy(w.ctrls, a, b, d)
	}, "every controller held once, renewed through the new stream leader")
	w.mu.Lock()
	t.Logf("stream leader stopped: longest time a controller had no owner %v", w.maxGap)
	w.mu.Unlock()
	w.waitConverged(20*time.Second, a, b, d)
}

func TestRunWaitsForNATS(t *testing.T) {
	n := testutil.StartNATS(t)
	n.Stop()
	w := newWorld(t, n.URL(), []string{"alpha", "bravo"})
	a := w.start("pod-a", func(o *testOptions) { o.Replicas = 1 })
	testutil.Eventually(t, 10*time.Second, func() bool { return a.c.Status().LastError != "" }, "the status to show the failure")
	if got := gauge(t, a.c, "veil_ha_leader", "alpha"); got != 0 {
		t.Errorf("veil_ha_leader = %v without NATS, want 0", got)
	}
	n.Start()
	testutil.Eventually(t, 20*time.Second, func() bool { return slices.Equal(w.held(a), []string{"alpha", "bravo"}) }, "pod-a to hold both once NATS is up")
	if st := a.c.Status(); st.LastError != "" || !st.Synced {
		t.Errorf("status after recovery: %+v", st)
	}
}

func TestSetControllersReleasesRemovedOnes(t *testing.T) {
	n := testutil.StartNATS(t)
	w := newWorld(t, n.URL(), []string{"alpha", "bravo"})
	a := w.start("pod-a", func(o *testOptions) { o.Replicas = 1 })
	b := w.start("pod-b", func(o *testOptions) { o.Replicas = 1 })
	w.waitConverged(20*time.Second, a, b)
	// pod-b drops bravo from its configuration: pod-a, the only one configured with it, runs it.
	b.c.SetControllers([]string{"alpha"})
	testutil.Eventually(t, 10*time.Second, func() bool {
		return a.c.Lease("bravo") != nil && b.c.Lease("bravo") == nil
	}, "bravo to run on pod-a only")
	if got := gauge(t, b.c, "veil_ha_leader", "bravo"); got != -1 {
		t.Errorf("pod-b still exports veil_ha_leader for bravo: %v", got)
	}
}

// TestSlowReleaseDelaysNoRenewal: a released controller that takes three lease TTLs to stop
// (a forwarder saving over a slow NATS) delays no renewal of the other leases: the
// coordinator waits for it off its loop. The controller is not acquired again meanwhile, and
// its lease is deleted (free) once it stopped.
func TestSlowReleaseDelaysNoRenewal(t *testing.T) {
	n := testutil.StartNATS(t)
	w := newWorld(t, n.URL(), []string{"alpha", "bravo"})
	release, stopping := make(chan struct{}), make(chan struct{})
	a := w.start("pod-a", func(o *testOptions) {
		o.Replicas = 1
		next := o.OnRelease
		o.OnRelease = func(ct string) func() {
			next(ct)
			if ct != "alpha" {
				return nil
			}
			return func() { close(stopping); <-release }
		}
	})
	w.waitConverged(20*time.Second, a)
	bravo := a.c.Lease("bravo")
	a.c.SetControllers([]string{"bravo"})
	<-stopping
	// Three renewals of bravo while alpha is stopping: renewals go on beside the release, and
	// bravo is never let go (a lapse regained by a renewal keeps the same lease).
	renewals(t, 3, func() {
		if a.c.Lease("alpha") != nil {
			t.Fatal("alpha acquired again before it stopped")
		}
	}, bravo)
	w.mu.Lock()
	if n := a.released["bravo"]; n != 0 {
		t.Errorf("bravo was released %d times while alpha was stopping", n)
	}
	w.mu.Unlock()
	if a.c.Lease("bravo") != bravo {
		t.Error("bravo's lease changed while alpha was stopping")
	}
	close(release)
	// Deleted for the next owner (not only run out) once it stopped.
	testutil.Eventually(t, 10*time.Second, func() bool {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		e := a.c.table.view.entries[leaseKey("alpha")]
		return e == nil || e.deleted
	}, "alpha's lease deleted once it stopped")
}
