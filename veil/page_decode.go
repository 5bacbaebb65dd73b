package veil

// Decoding pages: the envelope ({"count", "results"}) strictly, each result on its own terms,
// and the scan that tells whether encoding/json would read "results" from a body at all.

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
)

// DecodePage decodes a page of path read at offset (PageBody's answer).
func DecodePage[T any](path string, body []byte, offset int) (Page[T], error) {
	p, err := decodePage[T](body, offset)
	if err != nil {
		return Page[T]{}, fmt.Errorf("veil: decoding GET %s (offset %d): %w", path, offset, err)
	}
	return p, nil
}

// decodePage reads the DRF envelope strictly (count and results must be there; next and
// previous are ignored) and each result leniently.
//
// A page is decoded in one pass straight into []T. Only when that pass reports an error, even
// one the lenient rules forgive, is the page decoded again result by result: encoding/json
// reports only its first error, so a forgiven mismatch in one result could hide a fatal one in
// another, and the error must name the result that failed.
func decodePage[T any](body []byte, offset int) (Page[T], error) {
	if p, ok := decodePageFast[T](body); ok {
		return p, nil
	}
	return decodePageByResult[T](body, offset)
}

// decodePageFast decodes a page in one pass straight into []T; ok is false on any error.
//
// A key repeated in the envelope follows the rule of the results decoded one by one: the last
// "results" (matched case-insensitively, as encoding/json does) wins whole. encoding/json alone
// would decode a repeated array into the elements of the first, merging their fields, so a page
// that repeats it (resultsKeys, a scan far cheaper than decoding) takes the slower way.
func decodePageFast[T any](body []byte) (Page[T], bool) {
	if p, ok := decodePagePlain[T](body); ok {
		return p, true
	}
	if resultsKeys(body) > 1 {
		return decodePageAs[T, lastList[T]](body)
	}
	return decodePageAs[T, []T](body)
}

// decodePageAs decodes a page in one pass with its results read as R.
func decodePageAs[T any, R ~[]T](body []byte) (Page[T], bool) {
	var fast struct {
		Count   *Number `json:"count"`
		Results R       `json:"results"`
	}
	if json.Unmarshal(body, &fast) != nil || fast.Count == nil || fast.Results == nil {
		return Page[T]{}, false
	}
	results := []T(fast.Results)
	normalizeAll(results)
	return Page[T]{Count: int(*fast.Count), Results: results}, true
}

// lastList is a JSON array decoded afresh each time its key appears (the last one wins whole).
type lastList[T any] []T

func (l *lastList[T]) UnmarshalJSON(b []byte) error {
	var v []T
	err := json.Unmarshal(b, &v)
	*l = v
	return err
}

// resultsKeys counts the keys of the top-level object of body that encoding/json would match
// to "results" (exactly, else with its case folding). body need not be valid JSON: the count
// stops where it is not, and is then only a hint (the decoder reports what is wrong).
func resultsKeys(body []byte) int {
	s := jsonscan.Scanner{B: body}
	if !s.Enter() {
		return 0
	}
	k, members := 0, 0
	for s.Member(&members) {
		if envelopeNames.Lookup(s.Key) == envelopeResults {
			k++
		}
		if !s.Skip() {
			break
		}
	}
	return k
}

// envelopeNames are the fields of a page as decodePageAs reads it.
var (
	envelopeNames   = jsonscan.NewNames(jsonscan.FieldNames(reflect.TypeFor[pageEnvelope]())...)
	envelopeResults = envelopeNames.Index("results")
)

// decodeListPage decodes a page of a listing (List, listAll): the envelope strictly (an answer
// that is not a page fails the listing), then each result on its own terms: a result that does
// not decode, or an object with an id type (Node, Domain, ...) whose id is empty, is skipped and
// told to c.Reject; the rest of the page is kept. Page.Count is the count as announced.
func decodeListPage[T any](c *Client, path string, body []byte, offset int) (Page[T], error) {
	coll := CollectionOf(path)
	skip := func(i int, raw []byte, err error) {
		c.Reject(rejectionOf(coll, rawID(raw), fmt.Errorf("result %d: %w", offset+i, err)))
	}
	p, err := decodePageSkipping[T](body, offset, skip)
	if err != nil {
		return Page[T]{}, fmt.Errorf("veil: decoding GET %s (offset %d): %w", path, offset, err)
	}
	var zero T
	if _, ok := any(&zero).(identified); !ok {
		return p, nil
	}
	kept := p.Results[:0]
	for i := range p.Results {
		// Through a pointer: a struct of a kilobyte put in an interface is copied and allocated,
		// for every object of every page.
		v := &p.Results[i]
		if any(v).(identified).objectID() == "" {
			c.Reject(Rejection{Collection: coll, Field: "id", Reason: RejectMissingID, Count: 1,
				Err: fmt.Errorf("result %d has no id", offset+i)})
			continue
		}
		kept = append(kept, *v)
	}
	p.Results = kept
	return p, nil
}

// decodePageSkipping is decodePage, except that a result that does not decode is handed to
// skip (its index in the page, its bytes, the error) and left out, instead of failing the page.
func decodePageSkipping[T any](body []byte, offset int, skip func(i int, raw []byte, err error)) (Page[T], error) {
	if p, ok := decodePageFast[T](body); ok {
		return p, nil
	}
	env, err := decodeEnvelope(body)
	if err != nil {
		return Page[T]{}, err
	}
	p := Page[T]{Count: int(*env.Count), Results: make([]T, 0, len(env.Results))}
	for i, raw := range env.Results {
		var v T
		if err := decodeValue(raw, &v); err != nil {
			skip(i, raw, err)
			continue
		}
		p.Results = append(p.Results, v)
	}
	return p, nil
}

// rawID reads the id of an object that did not decode, when it is a string: at most 128
// bytes of it (it goes to a log line).
func rawID(raw []byte) string {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	var id string
	if json.Unmarshal(v.ID, &id) != nil {
		return ""
	}
	return capID(id)
}

// capID cuts an id from the controller to 128 bytes for a Rejection (it goes to a log line).
func capID(id string) string {
	if len(id) > 128 {
		id = strings.ToValidUTF8(id[:128], "") + "…"
	}
	return id
}

// pageEnvelope is a page with its results undecoded.
type pageEnvelope struct {
	Count   *Number           `json:"count"`
	Results []json.RawMessage `json:"results"`
}

// decodeEnvelope reads the DRF envelope strictly: count and results must be there.
func decodeEnvelope(body []byte) (pageEnvelope, error) {
	var env pageEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return env, fmt.Errorf("malformed JSON at byte %d of %d: %w", se.Offset, len(body), err)
		}
		return env, fmt.Errorf("not a page: %w", err)
	}
	if env.Count == nil || env.Results == nil {
		return env, errors.New(`not a page: "count" or "results" missing`)
	}
	return env, nil
}

// decodePageByResult decodes each result on its own, with the lenient rules and an error that
// names the failing result.
func decodePageByResult[T any](body []byte, offset int) (Page[T], error) {
	env, err := decodeEnvelope(body)
	if err != nil {
		return Page[T]{}, err
	}
	p := Page[T]{Count: int(*env.Count), Results: make([]T, len(env.Results))}
	for i, raw := range env.Results {
		if err := decodeValue(raw, &p.Results[i]); err != nil {
			return Page[T]{}, fmt.Errorf("result %d: %w", offset+i, err)
		}
	}
	return p, nil
}

// maxPrealloc bounds the room reserved from a page's count, which comes from the server.
const maxPrealloc = 1 << 17
