// Package jsonscantest makes the random JSON the property tests of the fast decoders (veil's
// pages, forwarder's event walk) hold them to encoding/json with: strings with escapes and
// invalid UTF-8, numbers of every size, any valid value, and member names spelt every way
// encoding/json still matches.
package jsonscantest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
)

// pieces make strings: escapes, control characters, quotes, invalid UTF-8, runes of every length.
var pieces = []string{"a", "Z", " ", "node-01", "\"", "\\", "/", "\n", "\t", "\x01", "\x7f", "é", "€", "😀",
	"\u2028", "\ufffd", "\xff", "\xc3", "<&>", "\u212a", "ſ"}

// String is a random string of up to five pieces.
func String(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// Float is a random finite number: zero, small and large integers, negative, tiny and huge
// magnitudes, two decimals.
func Float(r *rand.Rand) float64 {
	switch r.IntN(7) {
	case 0:
		return 0
	case 1:
		return float64(r.IntN(100000))
	case 2:
		return -float64(r.Int64())
	case 3:
		return math.Ldexp(r.Float64(), r.IntN(2000)-1000)
	case 4:
		return -r.Float64() * 1e21
	case 5:
		return math.Round(r.Float64()*10000) / 100
	}
	return r.NormFloat64() * 1e6
}

// RawJSON is a random valid JSON value, nested at most 4-depth deep.
func RawJSON(r *rand.Rand, depth int) json.RawMessage {
	var v any
	switch r.IntN(6) {
	case 0:
		v = nil
	case 1:
		v = String(r)
	case 2:
		v = Float(r)
	case 3:
		if depth < 4 {
			v = []any{RawJSON(r, depth+1), String(r)}
		}
	case 4:
		if depth < 4 {
			v = map[string]any{String(r): RawJSON(r, depth+1), "id": String(r)}
		}
	default:
		v = r.IntN(2) == 0
	}
	b, _ := json.Marshal(v)
	return b
}

// OddKeys rewrites the members of the objects nested at least two deep in body (valid JSON: a
// page's results): names in another case or folding ("ſ", the Kelvin sign), escaped; unknown
// members; a member repeated, its value the same or null; sometimes indented. The envelope is
// left as it is.
func OddKeys(r *rand.Rand, body []byte) []byte {
	s := jsonscan.Scanner{B: body}
	var out bytes.Buffer
	g := oddKeys{r: r}
	s.Space()
	g.copyValue(&s, &out, 0)
	if r.IntN(4) == 0 {
		var ind bytes.Buffer
		if json.Indent(&ind, out.Bytes(), " ", "\t") == nil {
			return ind.Bytes()
		}
	}
	return out.Bytes()
}

type oddKeys struct{ r *rand.Rand }

func (g oddKeys) copyValue(s *jsonscan.Scanner, out *bytes.Buffer, depth int) {
	odd := depth >= 2
	switch s.Peek() {
	case '{':
		s.Consume('{')
		out.WriteByte('{')
		n := 0
		for s.Member(&n) {
			key := string(s.Key)
			if n > 1 {
				out.WriteByte(',')
			}
			start := out.Len()
			if odd {
				key = g.name(key)
			}
			writeKey(out, key, odd && g.r.IntN(8) == 0)
			out.WriteByte(':')
			g.copyValue(s, out, depth+1)
			member := bytes.Clone(out.Bytes()[start:])
			if odd && g.r.IntN(10) == 0 { // repeated
				out.WriteByte(',')
				out.Write(member)
			}
			if odd && g.r.IntN(20) == 0 { // repeated as null
				out.WriteByte(',')
				writeKey(out, key, false)
				out.WriteString(":null")
			}
		}
		if odd && g.r.IntN(5) == 0 {
			if n > 0 {
				out.WriteByte(',')
			}
			out.WriteString(`"unknown_` + strconv.Itoa(g.r.IntN(3)) + `":` + string(RawJSON(g.r, 0)))
		}
		out.WriteByte('}')
	case '[':
		s.Consume('[')
		out.WriteByte('[')
		s.Space()
		for i := 0; !s.Consume(']'); i++ {
			if i > 0 {
				s.Consume(',')
				out.WriteByte(',')
				s.Space()
			}
			g.copyValue(s, out, depth+1)
			s.Space()
		}
		out.WriteByte(']')
	default:
		v, _ := s.Value()
		out.Write(v)
	}
	s.Space()
}

// name spells name another way encoding/json matches to the same field, one time in three.
func (g oddKeys) name(name string) string {
	if g.r.IntN(3) > 0 {
		return name
	}
	var b strings.Builder
	for _, c := range name {
		switch {
		case c == 's' && g.r.IntN(3) == 0:
			b.WriteRune('ſ')
		case c == 'k' && g.r.IntN(3) == 0:
			b.WriteRune('\u212a')
		case 'a' <= c && c <= 'z' && g.r.IntN(2) == 0:
			b.WriteRune(c - 'a' + 'A')
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// writeKey writes a member name, every rune of the BMP escaped as \uXXXX when escape is set.
func writeKey(out *bytes.Buffer, key string, escape bool) {
	if !escape {
		b, _ := json.Marshal(key)
		out.Write(b)
		return
	}
	out.WriteByte('"')
	for _, c := range key {
		if c > 0xffff {
			out.WriteRune(c)
			continue
		}
		fmt.Fprintf(out, `\u%04x`, c)
	}
	out.WriteByte('"')
}
