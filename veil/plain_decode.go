package veil

// decodePagePlain: the pages of the large listings (domains, disks, interfaces, datapools,
// nodes, the event journal) read in one pass by jsonscan's scanner, each result through its
// type's table (plain_fields.go), with each field set as encoding/json sets it. At 10,000 VMs a
// refresh decodes some 45,000 objects; encoding/json validated every page, scanned it again and
// set each field by reflection, and that was most of a refresh's CPU time. A page or an object
// of any other shape (a repeated or differently cased envelope key, a field of an unexpected
// type) is reported as not plain and decoded by encoding/json as before, so the result is always
// the one it gives.

import (
	"encoding/json"
	"strconv"
	"unsafe"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
)

// decodePagePlain decodes a page whose envelope is {"count": number, "next": ..., "previous":
// ..., "results": [...]} (each key at most once, exactly so named) and whose every result its
// type's table reads; ok is false for anything else, and for a type without a table. Raw results
// (json.RawMessage) are the results' bytes within body, not copies.
func decodePagePlain[T any](body []byte) (Page[T], bool) {
	var zero T
	_, isRaw := any(zero).(json.RawMessage)
	tab := tableOf[T]()
	if tab == nil && !isRaw {
		return Page[T]{}, false
	}
	s := jsonscan.Scanner{B: body}
	var results []T
	var count float64
	haveCount, n := false, 0
	if !s.Enter() {
		return Page[T]{}, false
	}
	for s.Member(&n) {
		switch string(s.Key) {
		case "count":
			num, ok := s.Number()
			if haveCount || !ok {
				return Page[T]{}, false
			}
			f, err := strconv.ParseFloat(string(num), 64)
			if err != nil {
				return Page[T]{}, false
			}
			count, haveCount = f, true
		case "results":
			if results != nil || !s.Consume('[') {
				return Page[T]{}, false
			}
			var ok bool
			if results, ok = plainResults[T](&s, tab); !ok {
				return Page[T]{}, false
			}
		case "next", "previous":
			if !s.Skip() {
				return Page[T]{}, false
			}
		default:
			return Page[T]{}, false
		}
	}
	if s.Bad || !s.End() || !haveCount || results == nil {
		return Page[T]{}, false
	}
	normalizeAll(results)
	return Page[T]{Count: int(Number(count)), Results: results}, true
}

// plainResults reads the elements of the results array, its '[' read: through tab, or as raw
// values when tab is nil.
func plainResults[T any](s *jsonscan.Scanner, tab *plainTable) ([]T, bool) {
	results := make([]T, 0, min(len(s.B)/64+1, MaxPageSize)) // a page is asked for MaxPageSize at most
	s.Space()
	if s.Consume(']') {
		return results, true
	}
	for {
		s.Space()
		results = append(results, *new(T))
		last := &results[len(results)-1]
		if tab == nil {
			tok, ok := s.Value()
			if !ok {
				return nil, false
			}
			*any(last).(*json.RawMessage) = tok[:len(tok):len(tok)]
		} else if s.Peek() != '{' || !tab.object(s, unsafe.Pointer(last)) {
			return nil, false
		}
		s.Space()
		if s.Consume(']') {
			return results, true
		}
		if !s.Consume(',') {
			return nil, false
		}
	}
}
