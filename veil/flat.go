package veil

import (
	"bytes"
	"unicode/utf8"
)

// A fast path for the small objects nested in every listed VM (node, parent, guest_utils):
// their UnmarshalJSON would otherwise run a whole json.Unmarshal (validation, then reflection)
// per object, which made it the largest cost of an inventory refresh. flatObject reads only the
// plain shape the platform sends; anything else is left to encoding/json, so the result is
// always what encoding/json would give.

// flatValue is one member value: a string without escapes, true, false, null, or an array of
// such strings.
type flatValue struct {
	kind byte // '"' string, 't' true, 'f' false, 'n' null, '[' strings
	s    []byte
	list []string
}

func (v flatValue) setString(p *string) bool {
	switch v.kind {
	case '"':
		*p = string(v.s)
	case 'n': // encoding/json leaves the field as it was
	default:
		return false
	}
	return true
}

func (v flatValue) setBool(p *bool) bool {
	switch v.kind {
	case 't', 'f':
		*p = v.kind == 't'
	case 'n':
	default:
		return false
	}
	return true
}

func (v flatValue) setStrings(p *[]string) bool {
	switch v.kind {
	case '[':
		*p = v.list
	case 'n':
		*p = nil
	default:
		return false
	}
	return true
}

// unknownKey accepts a key that is none of the known ones, not even in another case (which
// encoding/json would match).
func unknownKey(key []byte, known ...string) bool {
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	return true
}

// flatObject calls member for each member of the JSON object b and reports whether b had the
// plain shape (and every member call agreed). On false the caller decodes b with encoding/json.
func flatObject(b []byte, member func(key []byte, v flatValue) bool) bool {
	s := flatScanner{b: b}
	s.space()
	if !s.consume('{') {
		return false
	}
	s.space()
	if s.consume('}') {
		return s.end()
	}
	for {
		s.space()
		key, ok := s.str()
		if !ok {
			return false
		}
		s.space()
		if !s.consume(':') {
			return false
		}
		s.space()
		v, ok := s.value()
		if !ok || !member(key, v) {
			return false
		}
		s.space()
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return s.end()
		}
		return false
	}
}

type flatScanner struct {
	b []byte
	i int
}

func (s *flatScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *flatScanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *flatScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string without escapes or control characters that is valid UTF-8 (encoding/json
// would replace invalid bytes), returning its bytes as they are.
func (s *flatScanner) str() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	v, next, ok := plainString(s.b, s.i)
	if ok {
		s.i = next
	}
	return v, ok
}

// plainString reads, from b[start:] (after its opening quote), a string without escapes or
// control characters that is valid UTF-8 (encoding/json would replace invalid bytes): its
// bytes as they are, and the index after its closing quote.
func plainString(b []byte, start int) (v []byte, next int, ok bool) {
	ascii := true
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			v := b[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, 0, false
			}
			return v, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}

func (s *flatScanner) word(w string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		s.i += len(w)
		return true
	}
	return false
}

func (s *flatScanner) value() (flatValue, bool) {
	if s.i >= len(s.b) {
		return flatValue{}, false
	}
	switch s.b[s.i] {
	case '"':
		v, ok := s.str()
		return flatValue{kind: '"', s: v}, ok
	case 't':
		return flatValue{kind: 't'}, s.word("true")
	case 'f':
		return flatValue{kind: 'f'}, s.word("false")
	case 'n':
		return flatValue{kind: 'n'}, s.word("null")
	case '[':
		s.i++
		list := []string{} // encoding/json makes [] an empty, non-nil slice
		s.space()
		if s.consume(']') {
			return flatValue{kind: '[', list: list}, true
		}
		for {
			s.space()
			v, ok := s.str()
			if !ok {
				return flatValue{}, false
			}
			list = append(list, string(v))
			s.space()
			if s.consume(',') {
				continue
			}
			if s.consume(']') {
				return flatValue{kind: '[', list: list}, true
			}
			return flatValue{}, false
		}
	}
	return flatValue{}, false
}
