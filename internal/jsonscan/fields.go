package jsonscan

// Fields: the members encoding/json decodes into a struct, named as it names them.

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// Field is a struct field encoding/json decodes a member into, and the member's name.
type Field struct {
	Name string
	reflect.StructField
}

// Fields lists the fields of the struct type t that encoding/json decodes into, in field order:
// exported, not tagged "-", named by the tag when it is a valid name, else by the field. It
// panics on what the fast decoders do not read as encoding/json does (an embedded field, the
// ",string" option), so that a type gaining one fails its package's tests at once.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			panic(fmt.Sprintf("jsonscan: %v.%s: embedded fields are not supported", t, sf.Name))
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			panic(fmt.Sprintf("jsonscan: %v.%s: the \",string\" option is not supported", t, sf.Name))
		}
		if !validName(name) {
			name = sf.Name
		}
		out = append(out, Field{Name: name, StructField: sf})
	}
	return out
}

// FieldNames are the names of Fields(t), for NewNames.
func FieldNames(t reflect.Type) []string {
	var names []string
	for _, f := range Fields(t) {
		names = append(names, f.Name)
	}
	return names
}

// validName is encoding/json's rule for a tag's name.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
