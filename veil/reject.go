package veil

// Objects the client skips: one listing item, push frame, device detail or guest answer that
// does not decode costs that object only. The rest of its page and collection are used, and
// the object is told to Config.Rejected (the exporter counts it and logs it once).

import (
	"errors"
	"fmt"
	"strings"
)

// Reasons an object is rejected (the exporter's veil_objects_rejected_total reason label): a
// small fixed set.
const (
	// RejectDecode: not a JSON object, malformed, or not of the shape its collection lists.
	RejectDecode = "decode"
	// RejectType: a field the object cannot do without holds a value of another type (a
	// number sent as "n/a", an id that is an object). Lenient fields (decode.go) never reject.
	RejectType = "type"
	// RejectMissingID: a listed object without an id (it could be neither keyed nor exported).
	RejectMissingID = "missing_id"
	// RejectOverLimit: beyond a bound: a listing past a multiple of the count it first
	// announced, a guest's filesystems past the cap per VM.
	RejectOverLimit = "over_limit"
)

// Rejection is one object (or, for RejectOverLimit, a run of objects) the client skipped.
type Rejection struct {
	// Collection is where the object came from: a collection ("domains", "data-pools",
	// "vdisks"), for a push frame the resource's collection ("domains") or "push" for a frame
	// that names none, for a guest answer the command ("guest-get-fsinfo").
	Collection string
	ID         string // the object's id when it could be read ("" otherwise)
	Field      string // the field that did not decode, when known
	Reason     string // RejectDecode, RejectType, RejectMissingID, RejectOverLimit
	Count      int    // objects skipped: 1, or more for RejectOverLimit
	Err        error  // what was wrong, for the log
}

// RejectFunc is told about every object the client (or a caller decoding the client's answers)
// skipped. It is called from any goroutine and must not block.
type RejectFunc func(Rejection)

// Reject tells Config.Rejected about r (a caller that decodes objects of the client's answers
// itself, as the push channel's objects, reports its own with it). Count 0 is taken as 1.
func (c *Client) Reject(r Rejection) {
	if c == nil || c.rejected == nil {
		return
	}
	if r.Count <= 0 {
		r.Count = 1
	}
	c.rejected(r)
}

// DecodeError is why one object did not decode: the field when it could be found, and the
// reason (RejectDecode, RejectType or RejectMissingID).
type DecodeError struct {
	Field  string
	Reason string
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("field %q: %v", e.Field, e.Err)
	}
	return e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// rejectionOf makes a Rejection of a decoding error in collection; id may be "".
func rejectionOf(collection, id string, err error) Rejection {
	r := Rejection{Collection: collection, ID: id, Reason: RejectDecode, Count: 1, Err: err}
	var de *DecodeError
	if errors.As(err, &de) {
		r.Field, r.Reason = de.Field, de.Reason
	}
	return r
}

// CollectionOf names the collection of an API path or template for a Rejection:
// "/api/domains/" and "/api/domains/{id}/" are "domains", a push resource "/domains/" too,
// "/api/domains/{id}/available-guest-cmds/" is "domains/available-guest-cmds". Paths come from
// the client's own templates (and the push resources it subscribed to), so the names are few.
func CollectionOf(path string) string {
	var parts []string
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/api/"), "/") {
		if seg != "" && seg != "{id}" {
			parts = append(parts, seg)
		}
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, "/")
}
