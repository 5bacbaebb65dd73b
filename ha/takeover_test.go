// Tests of how soon a stopped owner's controller moves: when its lease runs out, whatever the
// phase of the other replicas' renew periods.

package ha

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// TestPausedOwnersControllerMovesWhenItsLeaseRunsOut pauses an owner right after a renewal that
// lands just after the other replica's renew period began, so that the lease runs out just
// after one of that replica's rounds: a replica that looks again only at its next period takes
// over at lease_ttl + 2.6 s. The bound is lease_ttl + 2 s, with lease_ttl 9 s (the README's
// failure table); the paused owner must have stopped first, and let go once resumed without
// writing over the new owner.
func TestPausedOwnersControllerMovesWhenItsLeaseRunsOut(t *testing.T) {
	const ttl = 9 * time.Second // renew period 3 s: more than the 2 s of the bound
	// How long after the survivor's period starts the owner renews: enough for the survivor's
	// round (a heartbeat and a look at the bucket) to be over, so it saw the lease still fresh.
	const phase = 400 * time.Millisecond
	ct := assignedTo("pod-a", "pod-b")
	w := newWorld(t, testutil.StartNATS(t).URL(), []string{ct})

	const (
		running = iota
		armed   // renew once more at the chosen phase, then pause
		paused
	)
	var state atomic.Int32
	survivorTicks := make(chan time.Time, 1) // the start of the survivor's latest period
	pausedAt := make(chan time.Time, 1)      // the owner's last round starts
	resume := make(chan struct{})
	wake := sync.OnceFunc(func() { close(resume) }) // SIGCONT
	t.Cleanup(wake)                                 // before the world stops its replicas
	a := w.start("pod-a", func(o *testOptions) {
		o.Replicas, o.LeaseTTL = 1, ttl
		o.beforeTick = func() {
			switch state.Load() {
			case armed:
				for {
					start := <-survivorTicks
					if d := time.Until(start.Add(phase)); d > 0 {
						<-time.After(d) // sets the phase of the renewal; nothing waits on it
						break
					}
				}
				state.Store(paused)
				pausedAt <- time.Now()
			case paused:
				<-resume
			}
		}
	})
	testutil.Eventually(t, 10*time.Second, func() bool { return a.c.Lease(ct) != nil }, "pod-a to hold %s", ct)
	b := w.start("pod-b", func(o *testOptions) {
		o.Replicas, o.LeaseTTL = 1, ttl
		o.beforeTick = func() {
			select {
			case <-survivorTicks:
			default:
			}
			survivorTicks <- time.Now()
		}
	})
	w.waitConverged(20*time.Second, a, b)
	l := a.c.Lease(ct)

	state.Store(armed)
	stopped := <-pausedAt
	testutil.Eventually(t, ttl+20*time.Second, func() bool { return b.c.Lease(ct) != nil }, "pod-b to take %s over", ct)
	took := time.Since(stopped)
	t.Logf("take-over from an owner paused right after its renewal: %v (lease_ttl %v)", took, ttl)
	if limit := ttl + 2*time.Second; took > limit {
		t.Errorf("take-over took %v, more than lease_ttl + 2 s (%v)", took, limit)
	}

	// Before it runs again, the paused owner's own clock has fenced its lease and its metric,
	// and a lease_ttl after it ran out ends it.
	if l.Valid() || l.Held() {
		t.Error("the paused owner's lease is still valid after another replica took the controller")
	}
	if got := gauge(t, a.c, "veil_ha_leader", ct); got != 0 {
		t.Errorf("the paused owner exports veil_ha_leader %v for %s, want 0", got, ct)
	}
	testutil.Eventually(t, ttl+10*time.Second, func() bool { return l.Context().Err() != nil }, "the paused owner's lease to end a lease_ttl after it ran out")
	wake()
	testutil.Eventually(t, 10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return a.released[ct] == 1
	}, "the resumed owner to stop %s", ct)
	if logs := w.logs.String(); strings.Contains(logs, "lost: another replica took it") {
		t.Errorf("a lease was written over:\n%s", logs)
	}
}

// assignedTo is the first of ctl0, ctl1... that the assignment gives to inst when other is the
// only other replica.
func assignedTo(inst, other string) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("ctl%d", i)
		if assign(everyone([]string{inst, other}, []string{name}), nil)[name] == inst {
			return name
		}
	}
}
