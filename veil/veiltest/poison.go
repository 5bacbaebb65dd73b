package veiltest

// This file holds the bad input the simulator serves on request (docs/events.md, "Bad input"): events a
// forwarder cannot publish as they are (a huge detail_message, a very long type, no id, a bad or
// missing created, dated far in the future), an odd field in one object of any collection, and
// hostile guest-agent answers. Each is what a controller or a guest may send on a bad day; none
// changes anything else the simulator serves. A poison event is in the journal like any other
// (GET /api/events/ lists it where ordering by created puts it, in its bad wire form), so a
// checker compares the stream with the journal as it does for good events.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The kinds of PoisonEvent.
const (
	PoisonHugeDetail  = "huge_detail"  // detail_message of Size bytes (default 1.5 MiB)
	PoisonLongType    = "long_type"    // type of Size characters (default 5,000), or Type as given
	PoisonBadCreated  = "bad_created"  // created is Created (default "not-a-date")
	PoisonNullCreated = "null_created" // created is null
	PoisonNoCreated   = "no_created"   // no created key
	PoisonNoID        = "no_id"        // no id key
	PoisonFuture      = "future"       // created Offset (default 1 h) ahead of the clock
)

// Defaults of PoisonEvent.
const (
	DefaultHugeDetail   = 3 << 19 // 1.5 MiB
	DefaultLongType     = 5000
	DefaultBadCreated   = "not-a-date"
	DefaultFutureOffset = time.Hour
)

// PoisonEvent describes one bad event for AddPoisonEvent.
type PoisonEvent struct {
	Kind    string        `json:"kind"`
	Size    int           `json:"size"`    // huge_detail: bytes of detail_message; long_type: characters of type
	Type    string        `json:"type"`    // long_type: the type itself (Size ignored); other kinds: the event's type (default "info")
	Created string        `json:"created"` // bad_created: the text of created
	Offset  time.Duration `json:"offset"`  // future: how far ahead of the clock
}

// PoisonEventInfo is what AddPoisonEvent wrote.
type PoisonEventInfo struct {
	ID      string `json:"id"`      // the id on the wire; "" for no_id
	Key     string `json:"key"`     // the journal's own key: GET /api/events/<key>/ answers the event (== ID but for no_id)
	Type    string `json:"type"`    // as on the wire
	Created string `json:"created"` // as on the wire; "" when absent, "null" for null_created
	Size    int    `json:"size"`    // of the event's JSON as GET /api/events/ serves it (English)
}

// badWire is how a poison event's wire form differs from a normal one's.
type badWire struct {
	noID      bool
	noCreated bool
	created   json.RawMessage // replaces created when not nil
}

func (b *badWire) apply(enc []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(enc, &m) != nil {
		return enc
	}
	if b.noID {
		delete(m, "id")
	}
	if b.noCreated {
		delete(m, "created")
	} else if b.created != nil {
		m["created"] = b.created
	}
	out, err := json.Marshal(m)
	if err != nil {
		return enc
	}
	return out
}

// AddPoisonEvent writes one bad event to the journal, about a random VM, created now (future:
// Offset from now). An event with a bad or missing created keeps its place as of now in the
// journal (the order GET /api/events/ lists it in); only its wire form is bad.
func (s *Server) AddPoisonEvent(p PoisonEvent) (PoisonEventInfo, error) {
	typ := p.Type
	if typ == "" {
		typ = "info"
	}
	var bad *badWire
	var detail text
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	created := now
	switch p.Kind {
	case PoisonHugeDetail:
		n := p.Size
		if n <= 0 {
			n = DefaultHugeDetail
		}
		d := hugeText(n)
		detail = text{d, d}
	case PoisonLongType:
		if p.Type == "" {
			n := p.Size
			if n <= 0 {
				n = DefaultLongType
			}
			typ = hugeText(n)
		}
	case PoisonBadCreated:
		c := p.Created
		if c == "" {
			c = DefaultBadCreated
		}
		raw, _ := json.Marshal(c)
		bad = &badWire{created: raw}
	case PoisonNullCreated:
		bad = &badWire{created: json.RawMessage("null")}
	case PoisonNoCreated:
		bad = &badWire{noCreated: true}
	case PoisonNoID:
		bad = &badWire{noID: true}
	case PoisonFuture:
		off := p.Offset
		if off <= 0 {
			off = DefaultFutureOffset
		}
		created = now.Add(off)
	default:
		return PoisonEventInfo{}, fmt.Errorf("unknown poison event kind %q (want %s, %s, %s, %s, %s, %s or %s)", p.Kind,
			PoisonHugeDetail, PoisonLongType, PoisonBadCreated, PoisonNullCreated, PoisonNoCreated, PoisonNoID, PoisonFuture)
	}
	var ents []eventEntity
	msg := txt("Controller event", "Событие контроллера")
	if len(s.st.domains) > 0 {
		d := s.st.domains[s.st.rng.IntN(len(s.st.domains))]
		ents = []eventEntity{{d.id, "domain"}}
		msg = txtf("Virtual machine %s: configuration changed", "Виртуальная машина %s: конфигурация изменена", d.name)
	}
	e := s.st.newEvent(created, event{typ: typ, user: "system", msg: msg, detail: detail, ents: ents})
	e.future = p.Kind == PoisonFuture
	e.bad = bad
	b := e.bytes(langEN)
	info := PoisonEventInfo{ID: e.id, Key: e.id, Type: typ, Created: ts(e.created), Size: len(b)}
	var wire map[string]json.RawMessage
	_ = json.Unmarshal(b, &wire)
	switch c, ok := wire["created"]; {
	case !ok:
		info.Created = ""
	case string(c) == "null":
		info.Created = "null"
	default:
		_ = json.Unmarshal(c, &info.Created)
	}
	if bad != nil && bad.noID {
		info.ID = ""
	}
	return info, nil
}

// hugeText is n bytes of readable ASCII (a log line repeated), as a long detail_message is.
func hugeText(n int) string {
	const line = "Traceback (most recent call last): File \"/opt/veil/controller/tasks.py\", line 42, in run; "
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		b.WriteString(line[:min(len(line), n-b.Len())])
	}
	return b.String()
}

// ---- an odd field in a listing ----

// OddField makes one object of a collection carry a field of an unexpected value (type) in
// every answer that holds it: the collection's listing, the object's detail, and its push frames
// (/ws/) and change log entries.
type OddField struct {
	Collection string          `json:"collection"` // the path segment under /api/: domains, nodes, clusters, data-pools, tasks, vdisks, vmachine-infs, events
	ID         string          `json:"id"`         // the object's id
	Field      string          `json:"field"`      // a top-level key, or a dotted path into nested objects (cpu_topology.cpu_count)
	Value      json.RawMessage `json:"value"`      // the JSON it gets (in Go json.RawMessage(`"n/a"`), in a control body "value": "n/a"); ignored when Remove
	Remove     bool            `json:"remove"`     // drop the key instead
}

// oddTable holds the odd fields by collection and object id; it is replaced, never changed.
type oddTable map[string]map[string][]OddField

// SetOddFields replaces the odd fields (none: every object as normal). The objects concerned
// that the push channel carries (domains, nodes, clusters, data-pools, tasks) are marked
// changed, so a subscriber gets them as they now are, as after an upgrade of the platform.
func (s *Server) SetOddFields(fs ...OddField) error {
	t := oddTable{}
	for _, f := range fs {
		f.Collection = strings.Trim(f.Collection, "/")
		if f.Collection == "" || f.ID == "" || f.Field == "" {
			return fmt.Errorf("an odd field needs collection, id and field: %+v", f)
		}
		if !f.Remove && !json.Valid(f.Value) {
			return fmt.Errorf("odd field %s of %s/%s: value %q is not JSON", f.Field, f.Collection, f.ID, f.Value)
		}
		if t[f.Collection] == nil {
			t[f.Collection] = map[string][]OddField{}
		}
		t[f.Collection][f.ID] = append(t[f.Collection][f.ID], f)
	}
	s.oddMu.Lock()
	old := s.odd
	if len(t) == 0 {
		t = nil
	}
	s.odd = t
	s.oddMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flushChanges()
	for _, tab := range []oddTable{old, t} {
		for coll, byID := range tab {
			for id := range byID {
				if obj := s.st.pushed(coll, id); obj != nil {
					s.st.changed(ChangeUpdated, obj)
				}
			}
		}
	}
	return nil
}

// pushed is the object of the push channel's resources that coll/id names, nil for none.
func (st *state) pushed(coll, id string) any {
	switch coll {
	case "domains":
		if d, ok := st.domainByID[id]; ok {
			return d
		}
	case "nodes":
		if n, ok := st.nodeByID[id]; ok {
			return n
		}
	case "clusters":
		if c, ok := st.clByID[id]; ok {
			return c
		}
	case "data-pools":
		if p, ok := st.poolByID[id]; ok {
			return p
		}
	case "tasks":
		if t, ok := st.taskByID[id]; ok {
			return t
		}
	}
	return nil
}

func (s *Server) oddFields() oddTable {
	s.oddMu.Lock()
	defer s.oddMu.Unlock()
	return s.odd
}

// oddCollection is the collection of an /api/ path ("/api/domains/<id>/" → "domains").
func oddCollection(p string) string {
	rest, ok := strings.CutPrefix(p, "/api/")
	if !ok {
		return ""
	}
	c, _, _ := strings.Cut(rest, "/")
	return c
}

// patchObject applies the odd fields of object obj (its JSON) when it has any.
func (t oddTable) patchObject(coll string, obj []byte) []byte {
	byID := t[coll]
	if len(byID) == 0 {
		return obj
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return obj
	}
	var id string
	if json.Unmarshal(m["id"], &id) != nil {
		return obj
	}
	fs := byID[id]
	if len(fs) == 0 {
		return obj
	}
	for _, f := range fs {
		m = setPath(m, strings.Split(f.Field, "."), f)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return obj
	}
	return out
}

func setPath(m map[string]json.RawMessage, path []string, f OddField) map[string]json.RawMessage {
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	if len(path) == 1 {
		if f.Remove {
			delete(m, path[0])
		} else {
			m[path[0]] = f.Value
		}
		return m
	}
	var inner map[string]json.RawMessage
	_ = json.Unmarshal(m[path[0]], &inner) // not an object: it becomes one
	inner = setPath(inner, path[1:], f)
	m[path[0]], _ = json.Marshal(inner)
	return m
}

// patchAnswer applies the odd fields to an answer of collection coll: each item of a page's
// results, or the detail object.
func (t oddTable) patchAnswer(coll string, body []byte) []byte {
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return body
	}
	raw, isPage := env["results"]
	if _, hasCount := env["count"]; !isPage || !hasCount {
		return t.patchObject(coll, body)
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return body
	}
	for i, it := range items {
		items[i] = t.patchObject(coll, it)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteByte(']')
	env["results"] = b.Bytes()
	out, err := json.Marshal(env)
	if err != nil {
		return body
	}
	return out
}

// withOddFields serves h, patching its 200 answer when an object of the path's collection has
// odd fields; otherwise h answers directly.
func (s *Server) withOddFields(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	t := s.oddFields()
	coll := oddCollection(r.URL.Path)
	if len(t[coll]) == 0 {
		h(w, r)
		return
	}
	fw := &fieldsWriter{ResponseWriter: w}
	h(fw, r)
	if fw.status == 0 {
		fw.status = 200
	}
	b := fw.buf.Bytes()
	if fw.status == 200 {
		b = t.patchAnswer(coll, b)
	}
	writeJSONBytes(w, fw.status, b)
}

// ---- hostile guest-agent answers ----

// The kinds of GuestHostile.
const (
	HostileMany        = "many"         // a list answer of N elements (guest-get-fsinfo: N filesystems; default 5,000)
	HostileLongStrings = "long_strings" // every string of the answer Size characters long (default 100,000)
	HostileWrongTypes  = "wrong_types"  // numbers become objects, booleans strings: of a list's first element only (one bad among good ones), else of the whole answer
	HostileRaw         = "raw"          // the answer is Raw as given
)

// GuestHostile makes a VM's guest agent answer one command with something hostile.
type GuestHostile struct {
	Command string          `json:"command"` // e.g. guest-get-fsinfo
	Kind    string          `json:"kind"`    // many, long_strings, wrong_types, raw; "" answers normally again
	N       int             `json:"n"`       // many: elements
	Size    int             `json:"size"`    // long_strings: characters per string
	Raw     json.RawMessage `json:"raw"`     // raw: the answer
}

// SetGuestHostile makes the VM's agent answer h.Command as h says (Kind "": normally again).
func (s *Server) SetGuestHostile(vmID string, h GuestHostile) error {
	switch h.Kind {
	case "", HostileMany, HostileLongStrings, HostileWrongTypes:
	case HostileRaw:
		if !json.Valid(h.Raw) {
			return fmt.Errorf("raw answer %q is not JSON", h.Raw)
		}
	default:
		return fmt.Errorf("unknown hostile answer kind %q (want %s, %s, %s or %s)", h.Kind, HostileMany, HostileLongStrings, HostileWrongTypes, HostileRaw)
	}
	if !guestCommandSet[h.Command] {
		return fmt.Errorf("unknown guest agent command %q", h.Command)
	}
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		if h.Kind == "" {
			delete(d.hostile, h.Command)
			return nil
		}
		if d.hostile == nil {
			d.hostile = map[string]GuestHostile{}
		}
		d.hostile[h.Command] = h
		return nil
	})
}

// hostileResult turns the normal answer v of a command into h's hostile one.
func hostileResult(h GuestHostile, v any) any {
	if h.Kind == HostileRaw {
		return h.Raw
	}
	b, _ := json.Marshal(v)
	var x any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&x) != nil {
		return v
	}
	switch h.Kind {
	case HostileMany:
		n := h.N
		if n <= 0 {
			n = 5000
		}
		list, ok := x.([]any)
		if !ok || len(list) == 0 {
			return x
		}
		out := make([]any, n)
		for i := range out {
			out[i] = numbered(list[i%len(list)], i)
		}
		return out
	case HostileLongStrings:
		n := h.Size
		if n <= 0 {
			n = 100_000
		}
		return longStrings(x, n)
	case HostileWrongTypes:
		if list, ok := x.([]any); ok && len(list) > 0 { // one bad element among good ones
			list[0] = wrongTypes(list[0], false)
			return list
		}
		return wrongTypes(x, false)
	}
	return x
}

// numbered is a copy of element v made the i-th distinct one: its name, mountpoint and dev
// carry the number (the first copies' too, so that none repeats).
func numbered(v any, i int) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = e
		if s, ok := e.(string); ok && (k == "name" || k == "mountpoint" || k == "dev") {
			out[k] = s + "-" + strconv.Itoa(i)
		}
	}
	return out
}

func longStrings(v any, n int) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = longStrings(e, n)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = longStrings(e, n)
		}
		return x
	case string:
		if len(x) >= n {
			return x
		}
		return x + strings.Repeat("x", n-len(x))
	}
	return v
}
