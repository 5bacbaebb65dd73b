// Tests of Lease on its own: what Valid and Held say after release, loss and expiry.

package ha

import (
	"testing"
	"time"
)

func TestLeaseHeldOutlivesReleaseButNotLossOrExpiry(t *testing.T) {
	newL := func(d time.Duration) *Lease {
		l := newLease(leaseGrant{"alpha", leaseKey("alpha"), "id", time.Now(), 1, time.Now().Add(d)}, time.Hour, func() {})
		t.Cleanup(l.end)
		return l
	}
	released := newL(time.Hour)
	released.end()
	if released.Valid() {
		t.Error("a released lease is still valid: the controller's work would go on")
	}
	if !released.Held() {
		t.Error("a released lease is not held before its record is deleted: the stopping forwarder could not save its last position")
	}
	lost := newL(time.Hour)
	lost.revoke()
	if lost.Valid() || lost.Held() {
		t.Errorf("a lease taken by another replica: valid %v, held %v; want neither", lost.Valid(), lost.Held())
	}
	expired := newL(0)
	if expired.Valid() || expired.Held() {
		t.Errorf("an expired lease: valid %v, held %v; want neither", expired.Valid(), expired.Held())
	}
}

// TestARanOutLeaseIsFencedUntilRenewedOrItsGraceEnds: a lease past its deadline fences its
// controller (neither valid nor held) without ending it; a renewal makes it valid again, and
// without one it ends by its own clock a grace later.
func TestARanOutLeaseIsFencedUntilRenewedOrItsGraceEnds(t *testing.T) {
	kicked := make(chan struct{}, 4)
	kick := func() { kicked <- struct{}{} }
	l := newLease(leaseGrant{"alpha", leaseKey("alpha"), "id", time.Now(), 1, time.Now().Add(time.Millisecond)}, time.Hour, kick)
	t.Cleanup(l.end)
	<-kicked // ran out: the coordinator is told
	if l.Valid() || l.Held() || l.Context().Err() != nil {
		t.Fatalf("a lease that ran out: valid %v, held %v, context %v; want fenced and not ended", l.Valid(), l.Held(), l.Context().Err())
	}
	l.extend(time.Now().Add(time.Hour)) // a renewal answered
	if !l.Valid() || !l.Held() {
		t.Errorf("a lease renewed after it ran out: valid %v, held %v; want both", l.Valid(), l.Held())
	}

	short := newLease(leaseGrant{"beta", leaseKey("beta"), "id", time.Now(), 1, time.Now().Add(time.Millisecond)}, 20*time.Millisecond, kick)
	t.Cleanup(short.end)
	select {
	case <-short.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a lease that ran out was not ended by its own clock after its grace")
	}
	if short.Valid() || short.Held() {
		t.Errorf("an ended lease: valid %v, held %v; want neither", short.Valid(), short.Held())
	}
}
