package jsonscan

// Unquote: a string token's value, as encoding/json decodes it.

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the string token tok (quotes included) as encoding/json does: escapes
// resolved, a surrogate pair joined, a lone surrogate and every byte of invalid UTF-8 replaced
// by U+FFFD. ok is false when tok is not a valid string token.
func Unquote(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[0] != '"' || tok[len(tok)-1] != '"' {
		return "", false
	}
	s := tok[1 : len(tok)-1]
	out := make([]byte, 0, len(s))
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '"' || c < 0x20:
			return "", false
		case c < utf8.RuneSelf && c != '\\':
			out = append(out, c)
			r++
		case c >= utf8.RuneSelf:
			rr, size := utf8.DecodeRune(s[r:]) // RuneError for an invalid byte, as encoding/json
			out = utf8.AppendRune(out, rr)
			r += size
		default: // an escape
			if r+1 >= len(s) {
				return "", false
			}
			e := s[r+1]
			r += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				if r+4 > len(s) || hex4(s[r:r+4]) < 0 {
					return "", false
				}
				rr := hex4(s[r : r+4])
				r += 4
				if utf16.IsSurrogate(rr) {
					rr = unicode.ReplacementChar
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(hex4(s[r-4:r]), hex4(s[r+2:r+6])); dec != unicode.ReplacementChar {
							rr = dec
							r += 6
						}
					}
				}
				out = utf8.AppendRune(out, rr)
			default:
				return "", false
			}
		}
	}
	return string(out), true
}

// hex4 reads four hex digits, -1 when they are not.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
