// Event decoding for the forwarder: a page's answer is decoded as raw results (one validating
// pass by the client's rules) and each event is then walked by jsonscan's scanner for the few
// fields forwarding needs (id, type, created, entities), with veil.Event's lenient rules, instead
// of being decoded whole by reflection. This runs for every event of a catch-up; a page's
// request slot is free again before it runs.

package forwarder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
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
// veil.Event.UnmarshalJSON; FuzzDecodeEvents and TestDecodeEventMatchesEncodingJSON hold the
// two to it): a key matches a field as encoding/json matches it (jsonscan.Names: exactly, else
// case-insensitively with its folding, "entitY_uuid" is entity_uuid, "entitieſ" is entities);
// of a repeated key the last wins; null leaves a field as it was, except created (veil.Time
// reads null as the zero time, so a later "created":null undoes an earlier one); a value of the
// wrong type is ignored (the field keeps what it had) except for id (an error), and a malformed
// created is an error; "entities" is read whole from its last member (an array replaces the
// entities, any other value leaves none).
func decodeEvent(b []byte, e *veil.Event) error {
	b = bytes.TrimSpace(b)
	*e = veil.Event{Raw: b}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%w: got JSON %s", errNotObject, jsonKind(b))
	}
	var idErr, createdErr error
	forEachField(b, eventFields, func(field int, v []byte) {
		switch field {
		case eventID:
			switch v[0] {
			case '"':
				e.ID, idErr = jsonString(v), nil
			case 'n': // null leaves it as it was
			default:
				e.ID, idErr = "", fmt.Errorf("field %q: got JSON %s, want string", "id", jsonKind(v))
			}
		case eventType:
			if v[0] == '"' {
				e.Type = jsonString(v)
			}
		case eventCreated: // null too: Time reads it as the zero time, as veil.Event does
			var t veil.Time
			createdErr = nil
			if terr := t.UnmarshalJSON(v); terr != nil {
				createdErr = fmt.Errorf("field %q: %w: %w", "created", errBadCreated, terr)
			}
			e.Created = t
		case eventEntities:
			e.Entities = decodeEntities(v)
		}
	})
	if idErr != nil {
		return idErr
	}
	return createdErr
}

// The fields of veil.Event and veil.EventEntity the walk reads, as encoding/json matches
// members to them (from their struct tags: a field renamed there fails here at init).
var (
	eventFields   = jsonscan.NewNames(jsonscan.FieldNames(reflect.TypeFor[veil.Event]())...)
	eventID       = eventFields.Index("id")
	eventType     = eventFields.Index("type")
	eventCreated  = eventFields.Index("created")
	eventEntities = eventFields.Index("entities")
	eventMsg      = eventFields.Index("message")
	entityFields  = jsonscan.NewNames(jsonscan.FieldNames(reflect.TypeFor[veil.EventEntity]())...)
	entityUUID    = entityFields.Index("entity_uuid")
	entityClass   = entityFields.Index("entity_class")
)

// eventMessage is the event's message (the status page shows it; nothing forwarded needs it, so
// decodeEvent leaves it out of every event of a catch-up).
func eventMessage(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	msg := ""
	if len(raw) == 0 || raw[0] != '{' {
		return msg
	}
	forEachField(raw, eventFields, func(field int, v []byte) {
		if field == eventMsg && v[0] == '"' {
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
	s := jsonscan.Scanner{B: v, I: 1}
	s.Space()
	for !s.Consume(']') {
		if len(ents) > 0 {
			if !s.Consume(',') {
				break
			}
			s.Space()
		}
		start := s.I
		s.SkipValid()
		elem := v[start:s.I]
		if len(elem) == 0 {
			break
		}
		var ent veil.EventEntity
		if elem[0] == '{' {
			forEachField(elem, entityFields, func(field int, val []byte) {
				if val[0] != '"' {
					return
				}
				switch field {
				case entityUUID:
					ent.UUID = jsonString(val)
				case entityClass:
					ent.Class = jsonString(val)
				}
			})
		}
		ents = append(ents, ent)
		s.Space()
	}
	return ents
}

// forEachField calls f with each member's value of the (valid) JSON object obj whose name names
// matches to a field, and that field's index.
func forEachField(obj []byte, names *jsonscan.Names, f func(field int, val []byte)) {
	s := jsonscan.Scanner{B: obj}
	s.Enter()
	n := 0
	for s.Member(&n) {
		i := names.Lookup(s.Key)
		start := s.I
		s.SkipValid() // the client has validated the page
		if i >= 0 && s.I > start {
			f(i, obj[start:s.I])
		}
	}
}

// jsonString decodes a (valid) JSON string token as encoding/json does.
func jsonString(v []byte) string {
	s := jsonscan.Scanner{B: v}
	str, _ := s.Str()
	return str
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
