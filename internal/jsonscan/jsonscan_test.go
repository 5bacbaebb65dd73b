package jsonscan

// The scanner, Unquote and Names held to encoding/json on generated input (seeded: a failure
// prints its seed; JSONSCAN_SEED replays one).

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(rand.Int64())
	if v := os.Getenv("JSONSCAN_SEED"); v != "" {
		s, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (JSONSCAN_SEED=%d replays it)", s, s)
		}
	})
	return s
}

// pieces are the parts strings are made of: the escapes, a surrogate pair and lone halves,
// invalid UTF-8, runes of several lengths, and what is invalid in a string.
var pieces = []string{`a`, `Z`, ` `, `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u0041`, `\u00e9`,
	`\ud83d\ude00`, `\ud83d`, `\ude00`, `\ud83dx`, `\ud83d\u0041`, `\uDFFF\uD800`, "\xff", "\xc3", "é", "€", "😀",
	"\u212a", "ſ", `\x`, `\u12`, "\x01", `"`, `\`}

func randString(r *rand.Rand) []byte {
	var b strings.Builder
	b.WriteByte('"')
	for range r.IntN(8) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	b.WriteByte('"')
	return []byte(b.String())
}

func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 1))
	for range 20000 {
		tok := randString(r)
		var want string
		werr := json.Unmarshal(tok, &want)
		got, ok := Unquote(tok)
		if ok != (werr == nil) || ok && got != want {
			t.Fatalf("Unquote(%q) = %q, %v; encoding/json %q, %v", tok, got, ok, want, werr)
		}
		s := Scanner{B: tok}
		if s.SkipString() && s.I == len(tok) != (werr == nil) {
			t.Fatalf("SkipString(%q) read it whole; encoding/json: %v", tok, werr)
		}
		s = Scanner{B: tok}
		v, ok := s.Str()
		if ok = ok && s.I == len(tok); ok != (werr == nil) || ok && v != want {
			t.Fatalf("Str(%q) = %q, %v; encoding/json %q, %v", tok, v, ok, want, werr)
		}
	}
}

// randValue is a JSON value, sometimes broken by one edit.
func randValue(r *rand.Rand, depth int) string {
	switch k := r.IntN(9); {
	case k == 0 && depth < 4:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, string(randString(r))+":"+randValue(r, depth+1))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case k == 1 && depth < 4:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, randValue(r, depth+1))
		}
		return "[ " + strings.Join(parts, ",") + "]"
	case k == 2:
		return string(randString(r))
	case k == 3:
		return []string{"true", "false", "null", "tru", "nul"}[r.IntN(5)]
	default:
		return []string{"0", "-0", "12", "-3.25", "1e9", "1E+2", "2.5e-3", "01", "1.", "-", ".5", "1e", "+1", "123456789012345678901234567890"}[r.IntN(14)]
	}
}

func TestSkipMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 2))
	for range 20000 {
		v := []byte(randValue(r, 0))
		if r.IntN(4) == 0 && len(v) > 0 {
			i := r.IntN(len(v))
			v = append(v[:i:i], v[i+1:]...) // drop a byte
		}
		s := Scanner{B: v}
		s.Space()
		start := s.I
		got := s.Skip() && s.End()
		if want := json.Valid(v); got != want {
			t.Fatalf("Skip(%s) read one valid value: %v; json.Valid: %v", v, got, want)
		}
		if got {
			s.I = start
			s.SkipValid()
			if !s.End() {
				t.Fatalf("SkipValid(%s) stopped at %d", v, s.I)
			}
		}
	}
}

func TestMemberReadsAnObject(t *testing.T) {
	s := Scanner{B: []byte(` { "a" : 1 , "b\u0041":[2], "c":{} } `)}
	var keys []string
	n := 0
	if !s.Enter() {
		t.Fatal("no object")
	}
	for s.Member(&n) {
		keys = append(keys, string(s.Key))
		if !s.Skip() {
			t.Fatal("bad value")
		}
	}
	if s.Bad || !s.End() || fmt.Sprint(keys) != "[a bA c]" {
		t.Fatalf("keys %q, bad %v, rest %q", keys, s.Bad, s.B[s.I:])
	}
	for _, bad := range []string{`{"a":1 "b":2}`, `{"a" 1}`, `{"a":1,}`, `{a:1}`} {
		s := Scanner{B: []byte(bad)}
		n := 0
		s.Enter()
		for s.Member(&n) {
			s.Skip()
		}
		if !s.Bad {
			t.Errorf("%s read as a valid object", bad)
		}
	}
}

// nameRunes make names that fold into one another in every way encoding/json knows.
var nameRunes = []string{"a", "A", "k", "K", "\u212a", "s", "S", "ſ", "_", "é", "É", "ß", "ẞ", "1"}

func randName(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(3) {
		b.WriteString(nameRunes[r.IntN(len(nameRunes))])
	}
	return b.String()
}

// TestLookupMatchesEncodingJSON builds structs whose fields have random names, decodes an object
// of one random key into each with encoding/json, and requires Lookup to name the field it set.
func TestLookupMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 3))
	for range 2000 {
		seen := map[string]bool{}
		var names []string
		var fields []reflect.StructField
		for i := range 1 + r.IntN(6) {
			name := randName(r)
			if seen[name] {
				continue // two fields of one name: encoding/json drops both
			}
			seen[name] = true
			names = append(names, name)
			fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: reflect.TypeFor[int](),
				Tag: reflect.StructTag(fmt.Sprintf(`json:"%s"`, name))})
		}
		n := NewNames(names...)
		for range 5 {
			key := randName(r)
			v := reflect.New(reflect.StructOf(fields))
			body, _ := json.Marshal(map[string]int{key: 1})
			if err := json.Unmarshal(body, v.Interface()); err != nil {
				t.Fatal(err)
			}
			want := -1
			for i := range fields {
				if v.Elem().Field(i).Int() == 1 {
					want = i
				}
			}
			if got := n.Lookup([]byte(key)); got != want {
				t.Fatalf("fields %q, key %q: Lookup %d, encoding/json set field %d", names, key, got, want)
			}
		}
	}
}

// TestFieldNamesAreEncodingJSONs: the names Fields gives are the keys encoding/json writes, in
// field order, for every kind of tag.
func TestFieldNamesAreEncodingJSONs(t *testing.T) {
	type odd struct {
		Plain   int
		Tagged  int `json:"tagged"`
		Omit    int `json:"omit,omitempty"`
		Dash    int `json:"-"`
		Empty   int `json:",omitempty"`
		Spaced  int `json:"with space"`
		Unicode int `json:"ключ"`
		hidden  int
	}
	b, err := json.Marshal(odd{Omit: 1, Empty: 1, hidden: 1})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	s := Scanner{B: b}
	n := 0
	s.Enter()
	for s.Member(&n) {
		keys = append(keys, string(s.Key))
		s.Skip()
	}
	if got := FieldNames(reflect.TypeFor[odd]()); !reflect.DeepEqual(got, keys) {
		t.Errorf("FieldNames %q, encoding/json writes %q", got, keys)
	}
}
