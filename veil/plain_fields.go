package veil

// plainTable: the fields the fast decoders read, taken from the struct tags once at init (one
// table per type, built by reflection), and the readers that set each field as encoding/json
// sets it. A field added to a type is read by the fast path with no other edit: its reader is
// chosen by its type, and TestFastPathDecodesAsEncodingJSON fills every field of every type
// read here to hold the result to encoding/json's.

import (
	"encoding/json"
	"reflect"
	"unsafe"

	"github.com/veil-exporter/veil-exporter/internal/jsonscan"
)

// fieldReader reads the value at s.I into the field at p, as encoding/json would, or reports
// false (the caller then leaves the whole input to encoding/json).
type fieldReader func(s *jsonscan.Scanner, p unsafe.Pointer) bool

// plainField is one field of a table: its offset in the struct, its kind and its reader.
type plainField struct {
	off  uintptr
	kind fieldKind
	read fieldReader
}

// fieldKind names the fields read without a call through read (the small objects nested in every
// listed VM have only these).
type fieldKind uint8

const (
	otherField fieldKind = iota
	stringField
	boolField
	stringsField
)

// plainTable is a struct type's fields as encoding/json matches members to them.
type plainTable struct {
	typ    reflect.Type
	names  *jsonscan.Names
	fields []plainField
	flat   bool // every field is a string, a bool or a []string
}

// plainTypes are the types whose pages decodePagePlain reads (the large listings); the tables of
// the types they hold are built with them.
var plainTypes = []reflect.Type{reflect.TypeFor[Domain](), reflect.TypeFor[Vdisk](),
	reflect.TypeFor[VMachineInf](), reflect.TypeFor[Datapool](), reflect.TypeFor[Node]()}

var (
	plainTables = map[reflect.Type]*plainTable{}
	// The objects whose UnmarshalJSON reads their plain shape through a table first.
	refTable        = tableFor(reflect.TypeFor[Ref]())
	guestUtilsTable = tableFor(reflect.TypeFor[GuestUtils]())
	tagObjectTable  = tableFor(reflect.TypeFor[tagObject]())
)

func init() {
	for _, t := range plainTypes {
		tableFor(t)
	}
}

// tableFor builds (once) the table of the struct type t and those of the types it holds.
func tableFor(t reflect.Type) *plainTable {
	if tab, ok := plainTables[t]; ok {
		return tab
	}
	tab := &plainTable{typ: t, flat: true}
	plainTables[t] = tab // before its fields: a type may hold itself
	fields := jsonscan.Fields(t)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
		read := readerFor(f.Type)
		kind := otherField
		switch {
		case !isPlainKind(f.Type):
		case f.Type.Kind() == reflect.String:
			kind = stringField
		case f.Type.Kind() == reflect.Bool:
			kind = boolField
		case f.Type.Kind() == reflect.Slice && isPlainKind(f.Type.Elem()) && f.Type.Elem().Kind() == reflect.String:
			kind = stringsField
		}
		tab.flat = tab.flat && kind != otherField
		tab.fields = append(tab.fields, plainField{off: f.Offset, kind: kind, read: read})
	}
	tab.names = jsonscan.NewNames(names...)
	return tab
}

// tableOf is the table of T, nil when T is not read plainly.
func tableOf[T any]() *plainTable {
	t := reflect.TypeFor[T]()
	for _, p := range plainTypes {
		if p == t {
			return plainTables[t]
		}
	}
	return nil
}

// isPlainKind reports whether t is a string, bool or slice type of its own kind's rules (no
// UnmarshalJSON or UnmarshalText of its own).
func isPlainKind(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return !pt.Implements(unmarshalerType) && !pt.Implements(textUnmarshalerType)
}

// object reads an object into the struct at p, member by member; null leaves it as it was.
func (tab *plainTable) object(s *jsonscan.Scanner, p unsafe.Pointer) bool {
	if s.Word("null") {
		return true
	}
	if !s.Consume('{') {
		return false
	}
	n := 0
	for s.Member(&n) {
		i := tab.names.Lookup(s.Key)
		if i < 0 {
			if !s.Skip() {
				return false
			}
			continue
		}
		f := &tab.fields[i]
		var ok bool
		if f.kind == otherField {
			ok = f.read(s, unsafe.Add(p, f.off))
		} else {
			ok = readFlat(s, f.kind, unsafe.Add(p, f.off))
		}
		if !ok {
			return false
		}
	}
	return !s.Bad
}

// whole reads b, which must be one object and nothing else, into the struct at p; ok is false
// for anything else and for a table that is not flat. The object is read without a call through
// a reader, so that neither the scanner nor the struct escapes to the heap (Ref, GuestUtils and
// Tag read one for every listed VM; TestSmallObjectsAreFlat keeps their tables flat).
func (tab *plainTable) whole(b []byte, p unsafe.Pointer) bool {
	if !tab.flat {
		return false
	}
	s := jsonscan.Scanner{B: b}
	if !s.Enter() {
		return false
	}
	n := 0
	for s.Member(&n) {
		i := tab.names.Lookup(s.Key)
		var ok bool
		if i < 0 {
			ok = s.Skip()
		} else {
			ok = readFlat(&s, tab.fields[i].kind, unsafe.Add(p, tab.fields[i].off))
		}
		if !ok {
			return false
		}
	}
	return !s.Bad && s.End()
}

// readFlat reads a string, bool or []string field.
func readFlat(s *jsonscan.Scanner, kind fieldKind, p unsafe.Pointer) bool {
	switch kind {
	case stringField:
		return readString(s, p)
	case boolField:
		return readBool(s, p)
	}
	return readStrings(s, p)
}

// readStrings reads a []string field: null is nil, [] an empty slice. encoding/json reuses the
// slice there, which gives the same value.
func readStrings(s *jsonscan.Scanner, p unsafe.Pointer) bool {
	pv := (*[]string)(p)
	if s.Word("null") {
		*pv = nil
		return true
	}
	if !s.Consume('[') {
		return false
	}
	list := []string{}
	s.Space()
	for !s.Consume(']') {
		if len(list) > 0 {
			if !s.Consume(',') {
				return false
			}
			s.Space()
		}
		if s.Peek() != '"' {
			return false
		}
		v, ok := s.Str()
		if !ok {
			return false
		}
		list = append(list, v)
		s.Space()
	}
	*pv = list
	return true
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()
)

// readerFor chooses the reader of a field of type t: a direct one for the types every listed
// object has, encoding/json's own decoding of the member's value for any other.
func readerFor(t reflect.Type) fieldReader {
	switch t {
	case reflect.TypeFor[Number]():
		return unmarshalAs[Number]
	case reflect.TypeFor[Ref]():
		return unmarshalAs[Ref]
	case reflect.TypeFor[GuestUtils]():
		return unmarshalAs[GuestUtils]
	case reflect.TypeFor[Time]():
		return unmarshalAs[Time]
	case reflect.TypeFor[Tag]():
		return unmarshalAs[Tag]
	case reflect.TypeFor[[]Tag]():
		return readTags
	case reflect.TypeFor[*Number]():
		return pointerTo[Number]
	case reflect.TypeFor[*Ref]():
		return pointerTo[Ref]
	case reflect.TypeFor[json.RawMessage]():
		return unmarshalAs[json.RawMessage]
	}
	pt := reflect.PointerTo(t)
	if pt.Implements(unmarshalerType) || pt.Implements(textUnmarshalerType) {
		return encodingJSONReader(t)
	}
	switch t.Kind() {
	case reflect.String:
		return readString
	case reflect.Bool:
		return readBool
	case reflect.Pointer:
		return pointerReader(t)
	case reflect.Struct:
		return tableFor(t).object
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 { // []byte is base64
			return sliceReader(t)
		}
	}
	return encodingJSONReader(t)
}

// unmarshalAs hands the value to T's UnmarshalJSON, as encoding/json does for a field that is
// not a pointer (null included).
func unmarshalAs[T any, P interface {
	*T
	json.Unmarshaler
}](s *jsonscan.Scanner, p unsafe.Pointer) bool {
	tok, ok := s.Value()
	return ok && P((*T)(p)).UnmarshalJSON(tok) == nil
}

// pointerTo reads a *T field whose T has UnmarshalJSON as pointerReader does, without
// reflection (Number and Ref: each listed object has some).
func pointerTo[T any, P interface {
	*T
	json.Unmarshaler
}](s *jsonscan.Scanner, p unsafe.Pointer) bool {
	pp := (**T)(p)
	if s.Word("null") {
		*pp = nil
		return true
	}
	if *pp == nil {
		*pp = new(T)
	}
	tok, ok := s.Value()
	return ok && P(*pp).UnmarshalJSON(tok) == nil
}

// encodingJSONReader decodes the value with encoding/json into the field (its rule for any type).
func encodingJSONReader(t reflect.Type) fieldReader {
	return func(s *jsonscan.Scanner, p unsafe.Pointer) bool {
		tok, ok := s.Value()
		return ok && json.Unmarshal(tok, reflect.NewAt(t, p).Interface()) == nil
	}
}

// readTags reads a []Tag field (every listed VM has one) without reflection: null is nil, []
// an empty slice, each element by Tag's UnmarshalJSON. encoding/json decodes the elements into
// the slice there, which gives the same value: UnmarshalJSON replaces a whole Tag.
func readTags(s *jsonscan.Scanner, p unsafe.Pointer) bool {
	pv := (*[]Tag)(p)
	if s.Word("null") {
		*pv = nil
		return true
	}
	if !s.Consume('[') {
		return false
	}
	out := []Tag{}
	s.Space()
	for !s.Consume(']') {
		if len(out) > 0 {
			if !s.Consume(',') {
				return false
			}
			s.Space()
		}
		out = append(out, Tag{})
		if !unmarshalAs[Tag](s, unsafe.Pointer(&out[len(out)-1])) {
			return false
		}
		s.Space()
	}
	*pv = out
	return true
}

// readString reads a string field; null leaves it as it was.
func readString(s *jsonscan.Scanner, p unsafe.Pointer) bool {
	if s.Peek() == '"' {
		v, ok := s.Str()
		if ok {
			*(*string)(p) = v
		}
		return ok
	}
	return s.Word("null")
}

// readBool reads a bool field; null leaves it as it was.
func readBool(s *jsonscan.Scanner, p unsafe.Pointer) bool {
	switch {
	case s.Word("true"):
		*(*bool)(p) = true
	case s.Word("false"):
		*(*bool)(p) = false
	default:
		return s.Word("null")
	}
	return true
}

// pointerReader reads a pointer field: null is nil; any other value is read into what it points
// to, allocated when nil (encoding/json merges a repeated member into the same one).
func pointerReader(t reflect.Type) fieldReader {
	elem := t.Elem()
	read := readerFor(elem)
	return func(s *jsonscan.Scanner, p unsafe.Pointer) bool {
		pp := (*unsafe.Pointer)(p)
		if s.Word("null") {
			*pp = nil
			return true
		}
		if *pp == nil {
			*pp = reflect.New(elem).UnsafePointer()
		}
		return read(s, *pp)
	}
}

// sliceReader reads a slice field as encoding/json does: null is nil, [] an empty slice, and the
// elements are read into the slice there (its length and capacity reused, each element merged).
func sliceReader(t reflect.Type) fieldReader {
	read := readerFor(t.Elem())
	empty := reflect.MakeSlice(t, 0, 0) // shared: appending to it allocates
	return func(s *jsonscan.Scanner, p unsafe.Pointer) bool {
		v := reflect.NewAt(t, p).Elem()
		if s.Word("null") {
			v.SetZero()
			return true
		}
		if !s.Consume('[') {
			return false
		}
		i := 0
		s.Space()
		for !s.Consume(']') {
			if i > 0 {
				if !s.Consume(',') {
					return false
				}
				s.Space()
			}
			if i >= v.Cap() {
				v.Grow(1)
			}
			if i >= v.Len() {
				v.SetLen(i + 1)
			}
			if !read(s, v.Index(i).Addr().UnsafePointer()) {
				return false
			}
			i++
			s.Space()
		}
		if i < v.Len() {
			v.SetLen(i)
		}
		if i == 0 {
			v.Set(empty)
		}
		return true
	}
}
