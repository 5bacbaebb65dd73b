package veil

// plainScanner: a strict, single-pass reader of the JSON the platform sends for the large
// listings (domains, disks, interfaces, events), which decodePagePlain walks instead of running
// encoding/json's validation, scan and reflection over every byte of a page. It accepts only
// valid JSON: whatever it cannot read exactly as encoding/json would is reported as not plain,
// and the page is then decoded by encoding/json.

import (
	"bytes"
	"encoding/json"
)

// maxPlainDepth bounds the nesting the scanner follows (encoding/json's own limit is 10,000; a
// page nested deeper than this is simply left to it).
const maxPlainDepth = 64

type plainScanner struct {
	b   []byte
	i   int
	key []byte // the member name member read
	bad bool   // member stopped on something not plain
}

func (s *plainScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *plainScanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads an object, calling field for each member, its name in s.key and the ':' after
// it read; it fails at the first member field cannot read, or where the object is not valid.
func (s *plainScanner) object(field func() bool) bool {
	n := 0
	if !s.enter() {
		return false
	}
	for s.member(&n) {
		if !field() {
			return false
		}
	}
	return !s.bad
}

// enter reads the '{' an object starts with.
func (s *plainScanner) enter() bool {
	s.ws()
	return s.consume('{')
}

// member reads the next member's name (into s.key) and the ':' after it, n being the members
// read before it; it returns false at the object's end, with s.bad set when that end was not
// valid JSON or the name not a plain string.
func (s *plainScanner) member(n *int) bool {
	s.ws()
	if s.consume('}') {
		return false
	}
	if *n > 0 {
		if !s.consume(',') {
			s.bad = true
			return false
		}
		s.ws()
	}
	key, ok := s.plain()
	if ok {
		s.ws()
		ok = s.consume(':')
	}
	if !ok {
		s.bad = true
		return false
	}
	s.ws()
	s.key = key
	*n++
	return true
}

// plain reads a string token without escapes, control characters or invalid UTF-8 (which
// encoding/json would replace): its bytes are then its value.
func (s *plainScanner) plain() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	v, next, ok := plainString(s.b, s.i)
	if ok {
		s.i = next
	}
	return v, ok
}

// value reads one valid JSON value and returns its bytes, as encoding/json hands them to an
// UnmarshalJSON method.
func (s *plainScanner) value() ([]byte, bool) {
	start := s.i
	if !s.skip(0) {
		return nil, false
	}
	return s.b[start:s.i], true
}

// skip reads one valid JSON value.
func (s *plainScanner) skip(depth int) bool {
	if s.i >= len(s.b) || depth > maxPlainDepth {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		return s.skipString()
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		s.ws()
		if s.consume(end) {
			return true
		}
		for {
			if c == '{' {
				if !s.skipString() {
					return false
				}
				s.ws()
				if !s.consume(':') {
					return false
				}
				s.ws()
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.ws()
			if s.consume(end) {
				return true
			}
			if !s.consume(',') {
				return false
			}
			s.ws()
		}
	case 't':
		return s.word("true")
	case 'f':
		return s.word("false")
	case 'n':
		return s.word("null")
	}
	return s.skipNumber()
}

func (s *plainScanner) word(w string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		s.i += len(w)
		return true
	}
	return false
}

// skipString reads a valid JSON string token (escapes checked; other bytes from 0x20 up are
// valid, as encoding/json has them).
func (s *plainScanner) skipString() bool {
	if !s.consume('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i >= len(s.b) {
				return false
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if s.i+4 > len(s.b) {
					return false
				}
				for _, h := range s.b[s.i : s.i+4] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber reads a number with JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *plainScanner) skipNumber() bool {
	s.consume('-')
	switch {
	case s.consume('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.consume('.') && s.digits() == 0 {
		return false
	}
	if s.consume('e') || s.consume('E') {
		if !s.consume('+') {
			s.consume('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *plainScanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// The setters below read a member's value into a field as encoding/json would, or report false.

// str reads a string field; null leaves it as it was.
func (s *plainScanner) str(p *string) bool {
	if s.i < len(s.b) && s.b[s.i] == '"' {
		start := s.i
		if v, ok := s.plain(); ok {
			*p = string(v)
			return true
		}
		s.i = start
		tok, ok := s.value()
		return ok && json.Unmarshal(tok, p) == nil // escapes, invalid UTF-8: decoded as encoding/json does
	}
	return s.word("null")
}

// boolean reads a bool field; null leaves it as it was.
func (s *plainScanner) boolean(p *bool) bool {
	switch {
	case s.word("true"):
		*p = true
	case s.word("false"):
		*p = false
	default:
		return s.word("null")
	}
	return true
}

// unmarshal hands the value to the field's UnmarshalJSON, as encoding/json does for a field
// that is not a pointer (null included).
func (s *plainScanner) unmarshal(u json.Unmarshaler) bool {
	tok, ok := s.value()
	return ok && u.UnmarshalJSON(tok) == nil
}

// null reads null for a pointer field, setting it to nil, and reports whether it was one.
func (s *plainScanner) null() bool {
	return s.word("null")
}

// numberPtr reads a *Number field: null is nil.
func (s *plainScanner) numberPtr(p **Number) bool {
	if s.null() {
		*p = nil
		return true
	}
	if *p == nil {
		*p = new(Number)
	}
	return s.unmarshal(*p)
}

// refPtr reads a *Ref field: null is nil.
func (s *plainScanner) refPtr(p **Ref) bool {
	if s.null() {
		*p = nil
		return true
	}
	if *p == nil {
		*p = new(Ref)
	}
	return s.unmarshal(*p)
}

// unknown accepts a member no field has: one that names none, not even in another case (which
// encoding/json would match). Its value is read and dropped.
func (s *plainScanner) unknown(fields []string) bool {
	for _, f := range fields {
		if bytes.EqualFold(s.key, []byte(f)) {
			return false
		}
	}
	return s.skip(0)
}
