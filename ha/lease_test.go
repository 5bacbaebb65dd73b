// Tests of Lease on its own: what Valid and Held say after release, loss and expiry.

package ha

import (
	"testing"
	"time"
)

func TestLeaseHeldOutlivesReleaseButNotLossOrExpiry(t *testing.T) {
	newL := func(d time.Duration) *Lease {
		l := newLease("alpha", leaseKey("alpha"), "id", time.Now(), 1, time.Now().Add(d), func() {})
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
