// Event decoding for the forwarder: a page's answer is decoded as raw results (one validating
// pass by the client's rules) and each event is then walked for the few fields forwarding needs (id, type, created,
// entities), with veil.Event's lenient rules, instead of being decoded whole by reflection. This
// runs for every event of a catch-up; a page's request slot is free again before it runs.

package forwarder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/veil-exporter/veil-exporter/veil"
)

// eventPager reads one page of the journal, undecoded: the one call of veil.Client the forwarder
// needs.
type eventPager interface {
	pageBody(ctx context.Context, offset, limit int, ordering string) ([]byte, error)
}

// clientPager reads pages through the platform client (limits, retries, token).
type clientPager struct{ c *veil.Client }

func (p clientPager) pageBody(ctx context.Context, offset, limit int, ordering string) ([]byte, error) {
	q := veil.Query{}
	if ordering != "" {
		q.Set("ordering", ordering)
	}
	return veil.PageBody(ctx, p.c, veil.PageRequest{Path: eventsPath, Offset: offset, Limit: limit, Query: q})
}

const eventsPath = "/api/events/"

// eventsPage reads and decodes one page.
func (j *journalReader) eventsPage(ctx context.Context, offset, limit int) (veil.Page[veil.Event], error) {
	body, err := j.pager.pageBody(ctx, offset, limit, j.ordering)
	if err != nil {
		return veil.Page[veil.Event]{}, err
	}
	return decodeEvents(body, offset)
}

// decodeEvents decodes the answer for a page read at offset: the envelope validated by the
// client's rules, then each event. An event that cannot be read as one (not an object, no id, no
// readable created) costs only itself (DESIGN §8): it is kept with Invalid set, the id given to it
// (invalidID) and, for want of its own, the created of its older neighbour on the page
// (neighbourCreated), so that the journal's order still places it; the forwarder publishes it to
// the invalid subject.
func decodeEvents(body []byte, offset int) (veil.Page[veil.Event], error) {
	raw, err := veil.DecodePage[json.RawMessage](eventsPath, body, offset)
	if err != nil {
		return veil.Page[veil.Event]{}, err
	}
	pg := veil.Page[veil.Event]{Count: raw.Count, Results: make([]veil.Event, len(raw.Results))}
	odd := false
	for i, r := range raw.Results {
		e := &pg.Results[i]
		err := decodeEvent(r, e)
		switch {
		case errors.Is(err, errNotObject):
			e.Invalid = rejectNotObject
		case errors.Is(err, errBadCreated):
			e.Invalid = rejectBadCreated
		case err != nil || e.ID == "":
			e.Invalid = rejectNoID
		case e.Created.IsZero():
			e.Invalid = rejectBadCreated
		}
		if e.Invalid != "" {
			odd = true
			if e.ID == "" || e.Invalid == rejectNoID {
				e.ID = invalidID(e.Raw)
			}
			if e.Invalid != rejectNoID {
				e.Created = veil.Time{}
			}
		}
	}
	if odd {
		neighbourCreated(pg.Results)
	}
	return pg, nil
}

// Reasons of veil_events_rejected_total for events that cannot be read as events.
const (
	rejectNoID       = "no_id"
	rejectBadCreated = "bad_created"
	rejectNotObject  = "not_an_object"
)

var (
	errNotObject  = errors.New("not a JSON object")
	errBadCreated = errors.New("created is not a time")
)

// invalidID is the id of an event that has none (or one that is not a string): "invalid-" and
// the first 16 bytes of its body's SHA-256 in hex, the same at every read.
func invalidID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "invalid-" + hex.EncodeToString(sum[:16])
}

// neighbourCreated gives each event without a created the created of its chronologically older
// neighbour on the page (the newer one when it is the oldest of the page): the journal lists it
// there, and a tie with its neighbour keeps every comparison of the forwarder in the list's order.
// A page with no readable created at all leaves them zero (the reader then takes the position's).
func neighbourCreated(items []veil.Event) {
	older := -1 // the index step towards older events: -1 oldest first, +1 newest first
	dated := make([]veil.Event, 0, len(items))
	for _, e := range items {
		if !e.Created.IsZero() {
			dated = append(dated, e)
		}
	}
	if detect(dated) == newestFirst {
		older = 1
	}
	borrowed := make([]bool, len(items))
	for i := range items {
		if items[i].Invalid == "" || !items[i].Created.IsZero() {
			continue
		}
		for _, step := range [2]int{older, -older} {
			for j := i + step; j >= 0 && j < len(items); j += step {
				if !items[j].Created.IsZero() && !borrowed[j] {
					items[i].Created, borrowed[i] = items[j].Created, true
					break
				}
			}
			if borrowed[i] {
				break
			}
		}
	}
}

// decodeEvent fills e from one result the client has already validated as JSON: ID, Type,
// Created, Entities and Raw (the object byte for byte). Message, User and Task are left empty:
// nothing forwarded is built from them (the body is Raw).
//
// Repeated keys and case follow veil.Event's own decoding (the rule is written down at
// veil.Event.UnmarshalJSON, and FuzzDecodeEvents holds the two to it): a key matches a field
// case-insensitively, with encoding/json's folding ("entitY_uuid" is entity_uuid, "entitieſ"
// is entities); of a repeated key the last wins; null leaves a field as it was; a value of the
// wrong type is ignored (the field keeps what it had) except for id (an error), and a malformed
// created is an error; "entities" is read whole from its last member (an array replaces the
// entities, any other value leaves none).
func decodeEvent(b []byte, e *veil.Event) error {
	b = bytes.TrimSpace(b)
	*e = veil.Event{Raw: b}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%w: got JSON %s", errNotObject, jsonKind(b))
	}
	var err, idErr, createdErr error
	forEachField(b, func(key, v []byte) {
		switch {
		case err != nil:
		case keyIs(key, "id"):
			switch v[0] {
			case '"':
				e.ID, idErr = jsonString(v), nil
			case 'n': // null leaves it as it was
			default:
				e.ID, idErr = "", fmt.Errorf("field %q: got JSON %s, want string", "id", jsonKind(v))
			}
		case keyIs(key, "type"):
			if v[0] == '"' {
				e.Type = jsonString(v)
			}
		case keyIs(key, "created"):
			if v[0] == 'n' {
				break // null leaves it as it was
			}
			var t veil.Time
			createdErr = nil
			if terr := t.UnmarshalJSON(v); terr != nil {
				createdErr = fmt.Errorf("field %q: %w: %w", "created", errBadCreated, terr)
			}
			e.Created = t
		case keyIs(key, "entities"):
			e.Entities = decodeEntities(v)
		}
	})
	if err != nil {
		return err
	}
	if idErr != nil {
		return idErr
	}
	return createdErr
}

// eventMessage is the event's message (the status page shows it; nothing forwarded needs it, so
// decodeEvent leaves it out of every event of a catch-up).
func eventMessage(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	msg := ""
	if len(raw) == 0 || raw[0] != '{' {
		return msg
	}
	forEachField(raw, func(key, v []byte) {
		if keyIs(key, "message") && len(v) > 0 && v[0] == '"' {
			msg = jsonString(v)
		}
	})
	return msg
}

// decodeEntities walks the entities array: an element that is not an object stays zero, a
// field of the wrong type is ignored, anything but an array gives none (as the lenient rules do).
func decodeEntities(v []byte) []veil.EventEntity {
	if v[0] != '[' {
		return nil
	}
	ents := []veil.EventEntity{}
	i := skipSpace(v, 1)
	for i < len(v) && v[i] != ']' {
		end := skipValue(v, i)
		var ent veil.EventEntity
		if v[i] == '{' {
			forEachField(v[i:end], func(key, val []byte) {
				if val[0] != '"' {
					return
				}
				switch {
				case keyIs(key, "entity_uuid"):
					ent.UUID = jsonString(val)
				case keyIs(key, "entity_class"):
					ent.Class = jsonString(val)
				}
			})
		}
		ents = append(ents, ent)
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return ents
}

// forEachField calls f with each key (quoted) and value of the (valid) JSON object obj.
func forEachField(obj []byte, f func(key, val []byte)) {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] != '}' {
		kEnd := skipValue(obj, i)
		key := obj[i:kEnd]
		i = skipSpace(obj, kEnd)
		i = skipSpace(obj, i+1) // past ':'
		vEnd := skipValue(obj, i)
		f(key, obj[i:vEnd])
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
}

// keyIs matches a quoted key against name as encoding/json does (case-insensitively, with
// Unicode's simple folding: "ſ" is "s" and the Kelvin sign "k", so a key may fold to name with
// another length).
func keyIs(quoted []byte, name string) bool {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') >= 0 || !isASCII(inner) {
		return strings.EqualFold(jsonString(quoted), name)
	}
	return len(inner) == len(name) && bytes.EqualFold(inner, []byte(name))
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// jsonString decodes a JSON string token; plain ASCII without escapes is copied as is.
func jsonString(v []byte) string {
	s := v[1 : len(v)-1]
	plain := true
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(s)
	}
	var out string
	_ = json.Unmarshal(v, &out) // valid JSON: cannot fail
	return out
}

// jsonKind names the kind of a JSON value for an error.
func jsonKind(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the (valid) JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipString returns the end of the string token starting at b[i] (the opening quote).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}
