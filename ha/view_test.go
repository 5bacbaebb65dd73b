package ha

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAReadFindingNothingForgetsNoNewerWrite: a read of the hand-over record sent before the
// next hand-over was written can answer "not found" after the watch delivered that record. The
// view keeps the record: forgetting it made the receiver take the controller without the
// record in view, never delete it, and every replica wait for it to expire (a renew period or
// more; three times in eight loaded runs of TestJoiningReplicasTakeTheirShareWithinARenewPeriod).
func TestAReadFindingNothingForgetsNoNewerWrite(t *testing.T) {
	v := &view{entries: map[string]*entry{}}
	now := time.Now()
	v.apply(handOverKey, 7, jetstream.KeyValueDelete, nil, now) // the last hand-over, deleted
	known := v.rev(handOverKey)                                 // a read is sent now
	next, _ := json.Marshal(handOverRecord{Controller: "c24", From: "pod-a", To: "pod-b"})
	v.apply(handOverKey, 8, jetstream.KeyValuePut, next, now) // the watch brings the next one
	v.forget(handOverKey, known)                              // the read's answer: not found
	if r, _ := v.handOver(now, time.Minute); r == nil || r.Controller != "c24" {
		t.Fatalf("the hand-over of c24 written after the read was forgotten: %+v", r)
	}
	// Nothing newer came: what the read found absent is forgotten.
	v.forget(handOverKey, v.rev(handOverKey))
	if _, ok := v.entries[handOverKey]; ok {
		t.Fatal("a record the read found absent, with nothing newer seen, is still in the view")
	}
	if v.rev(handOverKey) != 0 {
		t.Fatal("rev of an absent key is not 0")
	}
}
