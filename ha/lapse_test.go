// Tests of leases that run out before a renewal is answered: counted per controller, said once
// per run, and the run's end said once renewals keep up again.

package ha

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// TestLapsesAreCountedAndSaidOnce: a bucket that answers later than a renewal may take (the
// call timeout is a third of lease_ttl) lets every lease of the replica run out, again each
// time one is taken back in a slow spell. On a fleet benchmark under a CPU quota that happened a thousand times
// in three minutes with not one warning: each lapse was an info line among the releases. Every
// lapse is counted on its controller, the run is said once at warn, and its end once at info
// when renewals have kept up for lapseQuiet lease times.
func TestLapsesAreCountedAndSaidOnce(t *testing.T) {
	n := testutil.StartNATS(t)
	ctrls := names("ctl", 3)
	w := newWorld(t, n.URL(), ctrls)
	slow := &slowKV{}
	a := w.start("pod-a", func(o *testOptions) {
		o.Replicas = 1
		o.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { slow.KeyValue = kv; return slow }
	})
	w.waitConverged(30*time.Second, a)
	lapses := func() (sum float64) {
		for _, ct := range ctrls {
			sum += gauge(t, a.c, "veil_ha_lease_expirations_total", ct)
		}
		return sum
	}
	if got := lapses(); got != 0 {
		t.Fatalf("veil_ha_lease_expirations_total = %v before the bucket was slow, want 0", got)
	}
	// Two slow spells closer together than lapseQuiet lease times: one run.
	for spell := 1; spell <= 2; spell++ {
		slow.delay.Store(int64(testTTL))
		testutil.Eventually(t, 30*time.Second, func() bool { return lapses() >= float64(spell*len(ctrls)) },
			"every lease to run out %d times while the bucket answers %v late", spell, testTTL)
		slow.delay.Store(0)
		w.waitConverged(30*time.Second, a)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(w.logs.String(), "leases renewed in time again") },
		"the end of the run of lapses to be said")
	w.waitConverged(30*time.Second, a)
	var warned, ended int
	for _, l := range strings.Split(w.logs.String(), "\n") {
		if strings.Contains(l, "leases ran out before their renewals were answered") {
			warned++
			if !strings.Contains(l, "level=warn") {
				t.Errorf("a run of lapses said below warn: %s", l)
			}
		}
		if strings.Contains(l, "leases renewed in time again") {
			ended++
		}
	}
	if warned != 1 || ended != 1 {
		t.Errorf("the run of %v lapses was said %d times and its end %d times, want once each", lapses(), warned, ended)
	}
}

// TestALeaseThatRanOutIsRegainedWithoutARestart: a slow spell of the bucket shorter than a
// lease time lets the leases run out, and the renewals answered after it regain them: the
// controllers were fenced meanwhile but never released, so they go on where they were instead
// of starting again from scratch (on the fleet benchmark under a quota each restart's full
// listing made the next lapse).
func TestALeaseThatRanOutIsRegainedWithoutARestart(t *testing.T) {
	n := testutil.StartNATS(t)
	ctrls := names("ctl", 3)
	w := newWorld(t, n.URL(), ctrls)
	slow := &slowKV{}
	a := w.start("pod-a", func(o *testOptions) {
		o.Replicas = 1
		o.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { slow.KeyValue = kv; return slow }
	})
	w.waitConverged(30*time.Second, a)
	before := map[string]*Lease{}
	for _, ct := range ctrls {
		before[ct] = a.c.Lease(ct)
	}
	slow.delay.Store(int64(testTTL)) // longer than a call may take: every renewal fails
	for _, ct := range ctrls {
		testutil.Eventually(t, 10*time.Second, func() bool { return !before[ct].Held() }, "the lease of %s to run out", ct)
	}
	slow.delay.Store(0)
	for _, ct := range ctrls {
		testutil.Eventually(t, 10*time.Second, func() bool { return before[ct].Valid() }, "the lease of %s to be renewed again", ct)
		if got := gauge(t, a.c, "veil_ha_lease_expirations_total", ct); got < 1 {
			t.Errorf("veil_ha_lease_expirations_total{controller=%q} = %v after it ran out, want it counted", ct, got)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ct := range ctrls {
		if r := a.released[ct]; r != 0 {
			t.Errorf("%s was released %d times: a lease regained in time must not restart its controller", ct, r)
		}
	}
	if logs := w.logs.String(); strings.Contains(logs, "controller released") {
		t.Errorf("a controller was released:\n%s", logs)
	}
}
