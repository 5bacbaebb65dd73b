package veil

// Lenient decoding of what the real platform sends.
//
// What is tolerated and what fails:
//   - Number accepts a JSON number, a numeric string ("2.49", " 3 "), "" and null (0). Anything
//     else (an object, an array, a bool, "abc", NaN/Inf, out of range) fails the object: a value
//     silently read as 0 would become a wrong metric.
//   - Time accepts ISO 8601 with or without fraction and zone (no zone means UTC), with "T" or a
//     space; null and "" are the zero time. An unreadable timestamp fails the object.
//   - Ref accepts {"id","verbose_name"}, a bare uuid string, or null; anything else fails.
//   - GuestUtils accepts an object ({} without an agent); any other value reads as no agent.
//   - Any other field of a wrong type (a string where a bool is expected, an object for a
//     string, ...) is left at its zero value and the rest of the object is kept, except "id":
//     an object without a readable id fails. Missing fields are zero.
//   - Event keeps Raw, the exact bytes of the object, whatever it contains.
//   - Detail shapes: Uptime accepts seconds (number or string) or {uptime, start_time,
//     system_time, timezone}; Permissions an array of names or an object keyed by name; a
//     domain or node without cpu_count takes cpu_topology.cpu_count; resource_pool is a Ref
//     (object, uuid string) or nil for null.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

func (n *Number) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plainASCII(b[1:len(b)-1]) {
		// A string without escapes is its own bytes ("0.00", as every listed VM has two):
		// read without a json.Unmarshal, with the same rules.
		return n.parse(bytes.TrimSpace(b[1:len(b)-1]), b)
	}
	if f, ok := shortDecimal(b); ok {
		*n = Number(f)
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("cannot decode %s as a number", short(b))
		}
		s = strings.TrimSpace(s)
		if s == "" {
			*n = 0
			return nil
		}
	} else if s == "null" {
		*n = 0
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("cannot decode %s as a number", short(b))
	}
	*n = Number(f)
	return nil
}

// parse reads v, a string's trimmed contents, as a number ("" is 0); b is the JSON value, for
// the error.
func (n *Number) parse(v, b []byte) error {
	if len(v) == 0 {
		*n = 0
		return nil
	}
	if f, ok := shortDecimal(v); ok {
		*n = Number(f)
		return nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("cannot decode %s as a number", short(b))
	}
	*n = Number(f)
	return nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// shortDecimal reads -?[0-9]+(\.[0-9]+)? of at most 15 digits without strconv.ParseFloat's
// string (an allocation for each of the seven numbers of every listed VM). The value is the one
// ParseFloat gives: the digits and the power of ten are exact in a float64, and one division
// rounds correctly (strconv's own exact fast path).
func shortDecimal(b []byte) (float64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var mant uint64
	digits, frac, dot := 0, 0, -1
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
			if dot >= 0 {
				frac++
			}
		case c == '.' && dot < 0 && i > 0:
			dot = i
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 || dot == len(b)-1 {
		return 0, false
	}
	f := float64(mant) / pow10[frac]
	if neg {
		f = -f
	}
	return f, true
}

// plainASCII reports whether b is printable ASCII without quotes or backslashes: inside a JSON
// string, its own value.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// timeLayouts are the forms seen from the platform and its proxies; layouts without a zone are UTC.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02",
}

func (t *Time) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plainASCII(b[1:len(b)-1]) {
		s = string(b[1 : len(b)-1]) // without escapes, a string is its bytes (every event's created)
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("cannot decode %s as a time", short(b))
	}
	s = strings.TrimSpace(s)
	if s == "" {
		t.Time = time.Time{}
		return nil
	}
	for _, layout := range timeLayouts {
		if v, err := time.Parse(layout, s); err == nil {
			t.Time = v
			return nil
		}
	}
	return fmt.Errorf("cannot decode %s as a time", short(b))
}

// MarshalJSON writes RFC 3339 with nanoseconds, or null for the zero time.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.Time.Format(time.RFC3339Nano))
}

func (r *Ref) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*r = Ref{}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("cannot decode %s as a reference", short(b))
		}
		*r = Ref{ID: s}
		return nil
	case len(b) > 0 && b[0] == '{':
		var f Ref
		if refTable.whole(b, unsafe.Pointer(&f)) { // the plain object, read without encoding/json
			*r = f
			return nil
		}
		type plain Ref
		var v plain
		if err := tolerate(json.Unmarshal(b, &v)); err != nil {
			return fmt.Errorf("cannot decode %s as a reference: %w", short(b), err)
		}
		*r = Ref(v)
		return nil
	}
	return fmt.Errorf("cannot decode %s as a reference", short(b))
}

func (g *GuestUtils) UnmarshalJSON(b []byte) error {
	var f GuestUtils
	if guestUtilsTable.whole(b, unsafe.Pointer(&f)) { // the plain object, read without encoding/json
		*g = f
		return nil
	}
	type plain GuestUtils
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			v = plain{} // not an object ("", [], false): no agent data
		} else if err := tolerate(err); err != nil {
			return err
		}
	}
	*g = GuestUtils(v)
	return nil
}

// UnmarshalJSON keeps the exact bytes in Raw and tolerates odd fields (see the file comment),
// so one strange event cannot stop a forwarder.
//
// Repeated keys and case, the rule the forwarder's own event walk (forwarder/decode.go) follows
// too: a key matches a field as encoding/json matches it (exactly, else case-insensitively with
// its folding: "entitY_uuid" is entity_uuid); of a repeated key the last wins; null leaves a
// field as it was, except created (null is the zero time, as Time reads it); a value of the
// wrong type is ignored (the field keeps what it had), except for id (an error). "entities" is
// read whole from its last member: an array replaces the entities (each element an object whose
// entity_uuid and entity_class are read by the same rules, anything else a zero entity), null
// or any other value leaves none. encoding/json alone would merge a repeated array into the
// elements of the first.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var v struct {
		plain
		Entities eventEntities `json:"entities"` // shadows plain's
	}
	if err := tolerate(json.Unmarshal(b, &v)); err != nil {
		return err
	}
	v.plain.Entities = v.Entities
	v.Raw = append(json.RawMessage(nil), bytes.TrimSpace(b)...)
	*e = Event(v.plain)
	return nil
}

// eventEntities is an event's "entities", read afresh from each member of that name.
type eventEntities []EventEntity

func (es *eventEntities) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '[' {
		*es = nil
		return nil
	}
	var v []EventEntity
	if err := json.Unmarshal(b, &v); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return err
		}
		// An element or a field of the wrong type stays zero; encoding/json decoded the rest.
	}
	*es = v
	return nil
}

// tolerate drops a type mismatch of an ordinary field (it stays zero; encoding/json has decoded
// the rest of the object) and keeps every other error, including a bad "id".
func tolerate(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" && te.Field != "id" && !strings.HasSuffix(te.Field, ".id") {
		return nil
	}
	return err
}

// decodeValue decodes one object of the API leniently into v (a pointer to a struct). On
// failure the error is a *DecodeError naming the offending field when it can be found.
func decodeValue(b []byte, v any) error {
	err := tolerate(json.Unmarshal(b, v))
	if err == nil {
		if n, ok := v.(normalizer); ok {
			n.normalize()
		}
		return nil
	}
	var de *DecodeError
	if errors.As(err, &de) { // from a nested decodeValue (Raw[T])
		return de
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return &DecodeError{Field: te.Field, Reason: RejectType, Err: fmt.Errorf("got JSON %s, want %s", te.Value, te.Type)}
		}
		return &DecodeError{Reason: RejectDecode, Err: fmt.Errorf("got JSON %s, want an object", te.Value)}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) { // also "unexpected end of JSON input": a truncated body
		return &DecodeError{Reason: RejectDecode, Err: fmt.Errorf("malformed JSON at byte %d: %w", se.Offset, err)}
	}
	if field := badField(b, v); field != "" {
		return &DecodeError{Field: field, Reason: RejectType, Err: err}
	}
	return &DecodeError{Reason: RejectDecode, Err: err}
}

// badField finds which top-level field of the struct behind v fails to decode; it runs only on
// the error path, to make the error say what was wrong.
func badField(b []byte, v any) string {
	rt := reflect.TypeOf(v)
	if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return ""
	}
	rt = rt.Elem()
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return ""
	}
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		raw, ok := fields[name]
		if !ok {
			continue
		}
		if err := tolerate(json.Unmarshal(raw, reflect.New(f.Type).Interface())); err != nil {
			return name
		}
	}
	return ""
}

// short quotes the start of a JSON value for an error message.
func short(b []byte) string {
	const max = 40
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// objectID lets the pager drop an object seen twice when the collection shifts between pages.
func (n Node) objectID() string        { return n.ID }
func (c Cluster) objectID() string     { return c.ID }
func (d Datapool) objectID() string    { return d.ID }
func (d Domain) objectID() string      { return d.ID }
func (t Task) objectID() string        { return t.ID }
func (e Event) objectID() string       { return e.ID }
func (v Vdisk) objectID() string       { return v.ID }
func (v VMachineInf) objectID() string { return v.ID }

type identified interface{ objectID() string }

func (u *Uptime) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Uptime     Number `json:"uptime"`
			StartTime  Time   `json:"start_time"`
			SystemTime Time   `json:"system_time"`
			Timezone   string `json:"timezone"`
		}
		if err := tolerate(json.Unmarshal(b, &o)); err != nil {
			return fmt.Errorf("cannot decode %s as an uptime: %w", short(b), err)
		}
		*u = Uptime{Seconds: o.Uptime, StartTime: o.StartTime, SystemTime: o.SystemTime, Timezone: o.Timezone}
		return nil
	}
	var n Number
	if err := n.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("cannot decode %s as an uptime", short(b))
	}
	*u = Uptime{Seconds: n}
	return nil
}

func (p *Permissions) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*p = nil
		return nil
	case len(b) > 0 && b[0] == '{':
		var o map[string]json.RawMessage
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("cannot decode %s as permissions", short(b))
		}
		out := make(Permissions, 0, len(o))
		for k, v := range o {
			if s := string(bytes.TrimSpace(v)); s != "false" && s != "null" {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		*p = out
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("cannot decode %s as permissions", short(b))
	}
	out := make(Permissions, 0, len(list))
	for _, raw := range list {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, s)
		}
	}
	*p = out
	return nil
}

// normalizer is an object that fills fields from the platform's other shapes after decoding.
type normalizer interface{ normalize() }

// normalize takes the processor count from cpu_topology when the object lacks cpu_count.
func (d *Domain) normalize() {
	if d.CPUCount == 0 && d.CPUTopology != nil {
		d.CPUCount = d.CPUTopology.CPUCount
	}
}

func (n *Node) normalize() {
	if n.CPUCount == 0 && n.CPUTopology != nil {
		n.CPUCount = n.CPUTopology.CPUCount
	}
}

// normalizeAll calls normalize on every element when T has it.
func normalizeAll[T any](vs []T) {
	var zero T
	if _, ok := any(&zero).(normalizer); !ok {
		return
	}
	for i := range vs {
		any(&vs[i]).(normalizer).normalize()
	}
}
