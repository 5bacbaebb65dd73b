package jsonscan

// Names: encoding/json's rule matching a member name to a struct field.

import (
	"unicode"
	"unicode/utf8"
)

// Names are the JSON names of a struct's fields, in field order.
type Names struct {
	names, foldedNames []string // in field order; foldedNames[i] is fold(names[i])
	ascii              bool     // every name is ASCII and folds to a name of the same length
	exact, folded      map[string]int
	slots              [64]int8 // an ASCII name's index by slot(name); -1 none, -2 several
}

// slot is where an ASCII name's index is looked for first: its length and its two ends.
func slot[S string | []byte](name S) int {
	if len(name) == 0 {
		return 0
	}
	return (len(name)*7 + int(name[0])*3 + int(name[len(name)-1])) & 63
}

// NewNames indexes names (a struct's field names in field order, as encoding/json names them).
func NewNames(names ...string) *Names {
	n := &Names{names: names, ascii: len(names) < 127, exact: make(map[string]int, len(names)), folded: make(map[string]int, len(names))}
	for i := range n.slots {
		n.slots[i] = -1
	}
	for i, name := range names {
		switch k := slot(name); n.slots[k] {
		case -1:
			n.slots[k] = int8(min(i, 126))
		default:
			n.slots[k] = -2
		}
		n.exact[name] = i
		f := string(fold(nil, []byte(name)))
		n.foldedNames = append(n.foldedNames, f)
		n.ascii = n.ascii && isASCII(name) && len(f) == len(name)
		if _, ok := n.folded[f]; !ok { // as encoding/json: the first field of a folded name takes it
			n.folded[f] = i
		}
	}
	return n
}

// Lookup returns the index of the field encoding/json decodes the member named key (unquoted)
// into, -1 for none: the field of exactly that name, else the first whose name folds as key does.
func (n *Names) Lookup(key []byte) int {
	if !n.ascii {
		return n.lookupMap(key)
	}
	// Without a map: the name of key's slot, when it is key; else an ASCII key folds to a name
	// of its own length, compared byte by byte with the letters upper-cased, as fold does.
	if i := n.slots[slot(key)]; i >= 0 && n.names[i] == string(key) {
		return int(i)
	}
	if isASCII(key) {
		match := -1
		for i, name := range n.names {
			if len(name) != len(key) {
				continue
			}
			if name == string(key) {
				return i
			}
			if match < 0 && equalUpper(key, n.foldedNames[i]) {
				match = i
			}
		}
		return match
	}
	return n.lookupMap(key)
}

// lookupMap is Lookup through the maps, as encoding/json looks a key up.
func (n *Names) lookupMap(key []byte) int {
	if i, ok := n.exact[string(key)]; ok {
		return i
	}
	var buf [32]byte
	if i, ok := n.folded[string(fold(buf[:0], key))]; ok {
		return i
	}
	return -1
}

// equalUpper reports whether the ASCII key, its letters upper-cased, is upper.
func equalUpper(key []byte, upper string) bool {
	for i, c := range key {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

func isASCII[S string | []byte](s S) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// fold appends name folded as encoding/json folds it: ASCII letters to upper case, every other
// rune to the smallest rune of its simple folding orbit.
func fold(out, name []byte) []byte {
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		out = utf8.AppendRune(out, r)
		i += size
	}
	return out
}

// Index is the index of name, which must be one of the names: it panics otherwise, so that a
// decoder naming a field its struct no longer has fails at init.
func (n *Names) Index(name string) int {
	i, ok := n.exact[name]
	if !ok {
		panic("jsonscan: no field named " + name)
	}
	return i
}
