package jsonscan

// Scanner: a strict, single-pass reader of a JSON byte slice.

import (
	"bytes"
	"unicode/utf8"
)

// MaxDepth bounds the nesting Skip follows (encoding/json's own limit is 10,000; input nested
// deeper than this is left to it).
const MaxDepth = 64

// Scanner reads B from I. Every method that reads a token returns false, I then unspecified
// unless it says otherwise, when the input there is not that token as valid JSON.
type Scanner struct {
	B   []byte
	I   int
	Key []byte // the member name Member read, unquoted
	Bad bool   // Member stopped on something not valid JSON
}

// Space skips JSON whitespace.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Peek is the byte at I, 0 at the end.
func (s *Scanner) Peek() byte {
	if s.I < len(s.B) {
		return s.B[s.I]
	}
	return 0
}

// Consume reads c if it is next.
func (s *Scanner) Consume(c byte) bool {
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// Word reads the literal w (true, false, null) if it is next.
func (s *Scanner) Word(w string) bool {
	if len(s.B)-s.I >= len(w) && string(s.B[s.I:s.I+len(w)]) == w {
		s.I += len(w)
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.Space()
	return s.I == len(s.B)
}

// Enter reads the '{' an object starts with (after whitespace). Member then reads its members.
func (s *Scanner) Enter() bool {
	s.Space()
	return s.Consume('{')
}

// Member reads the next member's name into Key and the ':' after it (and the whitespace after
// that), n counting the members read before it; it returns false at the object's end, with Bad
// set when that end was not valid JSON.
func (s *Scanner) Member(n *int) bool {
	s.Space()
	if s.Consume('}') {
		return false
	}
	if *n > 0 {
		if !s.Consume(',') {
			s.Bad = true
			return false
		}
		s.Space()
	}
	key, ok := s.keyToken()
	if ok {
		s.Space()
		ok = s.Consume(':')
	}
	if !ok {
		s.Bad = true
		return false
	}
	s.Space()
	s.Key = key
	*n++
	return true
}

// keyToken reads a member name: its bytes when plain, else the unquoted copy.
func (s *Scanner) keyToken() ([]byte, bool) {
	if v, ok := s.Plain(); ok {
		return v, true
	}
	start := s.I
	if !s.SkipString() {
		return nil, false
	}
	k, _ := Unquote(s.B[start:s.I])
	return []byte(k), true
}

// Plain reads a string token without escapes, control characters or invalid UTF-8 and returns
// its contents, which are then its value (a slice of B, not a copy). On false I is unchanged.
func (s *Scanner) Plain() ([]byte, bool) {
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return nil, false
	}
	start := s.I + 1
	ascii := true
	for j := start; j < len(s.B); j++ {
		c := s.B[j]
		if plainASCII[c] {
			continue
		}
		switch {
		case c == '"':
			v := s.B[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.I = j + 1
			return v, true
		case c >= utf8.RuneSelf:
			ascii = false
		default: // a backslash or a control character
			return nil, false
		}
	}
	return nil, false
}

// plainASCII are the bytes that stand for themselves in a string: ASCII from 0x20 up but the
// quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Str reads a string token and returns its value as encoding/json decodes it.
func (s *Scanner) Str() (string, bool) {
	if v, ok := s.Plain(); ok {
		return string(v), true
	}
	start := s.I
	if !s.SkipString() {
		return "", false
	}
	return Unquote(s.B[start:s.I])
}

// Value reads one valid JSON value and returns its bytes (a slice of B), as encoding/json hands
// them to an UnmarshalJSON method.
func (s *Scanner) Value() ([]byte, bool) {
	start := s.I
	if !s.Skip() {
		return nil, false
	}
	return s.B[start:s.I], true
}

// Skip reads one valid JSON value.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	if s.I >= len(s.B) || depth > MaxDepth {
		return false
	}
	switch c := s.B[s.I]; c {
	case '"':
		return s.SkipString()
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.I++
		s.Space()
		if s.Consume(end) {
			return true
		}
		for {
			if c == '{' {
				if !s.SkipString() {
					return false
				}
				s.Space()
				if !s.Consume(':') {
					return false
				}
				s.Space()
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.Space()
			if s.Consume(end) {
				return true
			}
			if !s.Consume(',') {
				return false
			}
			s.Space()
		}
	case 't':
		return s.Word("true")
	case 'f':
		return s.Word("false")
	case 'n':
		return s.Word("null")
	}
	_, ok := s.Number()
	return ok
}

// SkipString reads a valid JSON string token (escapes checked; every other byte from 0x20 up is
// valid, as encoding/json has it).
func (s *Scanner) SkipString() bool {
	if !s.Consume('"') {
		return false
	}
	for s.I < len(s.B) {
		c := s.B[s.I]
		s.I++
		if plainASCII[c] || c >= utf8.RuneSelf {
			continue // invalid UTF-8 is valid JSON: encoding/json replaces it
		}
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.I >= len(s.B) {
				return false
			}
			e := s.B[s.I]
			s.I++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if s.I+4 > len(s.B) || hex4(s.B[s.I:s.I+4]) < 0 {
					return false
				}
				s.I += 4
			default:
				return false
			}
		}
	}
	return false
}

// Number reads a number token with JSON's grammar, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
// and returns its bytes.
func (s *Scanner) Number() ([]byte, bool) {
	start := s.I
	s.Consume('-')
	switch {
	case s.Consume('0'):
	case s.I < len(s.B) && '1' <= s.B[s.I] && s.B[s.I] <= '9':
		s.digits()
	default:
		return nil, false
	}
	if s.Consume('.') && s.digits() == 0 {
		return nil, false
	}
	if s.Consume('e') || s.Consume('E') {
		if !s.Consume('+') {
			s.Consume('-')
		}
		if s.digits() == 0 {
			return nil, false
		}
	}
	return s.B[start:s.I], true
}

func (s *Scanner) digits() int {
	n := 0
	for s.I < len(s.B) && '0' <= s.B[s.I] && s.B[s.I] <= '9' {
		s.I++
		n++
	}
	return n
}

// SkipValid reads one value of input already validated (by Skip or Value, or by encoding/json),
// faster than Skip: strings are crossed to their closing quote without looking at what is in
// them, containers by counting brackets. On input that is not valid JSON its result is undefined.
func (s *Scanner) SkipValid() {
	if s.I >= len(s.B) {
		return
	}
	switch s.B[s.I] {
	case '"':
		s.skipValidString()
	case '{', '[':
		depth := 0
		for s.I < len(s.B) {
			switch s.B[s.I] {
			case '"':
				s.skipValidString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.I++
					return
				}
			}
			s.I++
		}
	default:
		for s.I < len(s.B) {
			switch s.B[s.I] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			s.I++
		}
	}
}

// skipValidString crosses a valid string token: to the first quote not escaped.
func (s *Scanner) skipValidString() {
	for i := s.I + 1; ; {
		j := bytes.IndexByte(s.B[i:], '"')
		if j < 0 {
			s.I = len(s.B)
			return
		}
		i += j
		k := i
		for k > s.I && s.B[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 { // an even run of backslashes escapes none of them: the quote ends it
			s.I = i + 1
			return
		}
		i++
	}
}
