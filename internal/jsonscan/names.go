package jsonscan

// Names: encoding/json's rule matching a member name to a struct field.

import (
	"unicode"
	"unicode/utf8"
)

// Names are the JSON names of a struct's fields, in field order.
type Names struct {
	exact  map[string]int
	folded map[string]int
}

// NewNames indexes names (a struct's field names in field order, as encoding/json names them).
func NewNames(names ...string) *Names {
	n := &Names{exact: make(map[string]int, len(names)), folded: make(map[string]int, len(names))}
	for i, name := range names {
		n.exact[name] = i
		f := string(fold(nil, []byte(name)))
		if _, ok := n.folded[f]; !ok { // as encoding/json: the first field of a folded name takes it
			n.folded[f] = i
		}
	}
	return n
}

// Lookup returns the index of the field encoding/json decodes the member named key (unquoted)
// into, -1 for none: the field of exactly that name, else the first whose name folds as key does.
func (n *Names) Lookup(key []byte) int {
	if i, ok := n.exact[string(key)]; ok {
		return i
	}
	var buf [32]byte
	if i, ok := n.folded[string(fold(buf[:0], key))]; ok {
		return i
	}
	return -1
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
