package veil

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// flatCases are objects of every shape the fast path reads and of shapes it must hand to
// encoding/json.
var flatCases = []string{
	`{}`,
	` { } `,
	`{"id":"a","verbose_name":"node-1"}`,
	`{"verbose_name":"n","id":"b","extra":null}`,
	`{"id":null,"verbose_name":"x"}`,
	`{"id":"a","id":"b"}`,
	`{"ID":"upper"}`,
	`{"Id":"a","id":"b"}`,
	`{"id":"esc\"aped"}`,
	`{"id":"\u00e9"}`,
	"{\"id\":\"caf\xc3\xa9\"}",
	"{\"id\":\"bad\xff\"}",
	`{"id":5}`,
	`{"id":{"nested":1}}`,
	`{"id":"a",}`,
	`{"id":"a"} x`,
	`{"veil_state":true,"version":"101.1.0","hostname":"h","ipv4":["10.0.0.1","10.0.0.2"],"interfaces":["eth0"],"qemu_state":true}`,
	`{"veil_state":false,"ipv4":[],"interfaces":null,"qemu_state":false}`,
	`{"qemu_state":"yes","hostname":"h"}`,
	`{"ipv4":["a",1]}`,
	`{"ipv4":"10.0.0.1"}`,
	`{"Qemu_State":true}`,
	`{"unknown":[ "a" , "b" ],"more":true,"qemu_state":true}`,
	`{"unknown":12,"qemu_state":true}`,
	"{\n\t\"qemu_state\" : true\r\n}",
	`{"hostname":"tru`,
	`{"veil_state":tru}`,
	`[]`,
	`""`,
	`null`,
}

// TestFlatObjectDecodesAsEncodingJSON proves the fast path of Ref and GuestUtils gives exactly
// what decoding with encoding/json alone gives: the same value and the same success.
func TestFlatObjectDecodesAsEncodingJSON(t *testing.T) {
	for _, in := range flatCases {
		t.Run(in, func(t *testing.T) { compareFlat(t, []byte(in)) })
	}
}

func FuzzFlatObject(f *testing.F) {
	for _, in := range flatCases {
		f.Add([]byte(in))
	}
	f.Fuzz(compareFlat)
}

// compareFlat decodes b into Ref and GuestUtils through their UnmarshalJSON and through
// encoding/json alone (slowRef, slowGuestUtils), and fails on any difference.
func compareFlat(t *testing.T, b []byte) {
	if !json.Valid(b) {
		return // encoding/json never calls an UnmarshalJSON with invalid JSON
	}
	var fastR, slowR Ref
	errF := json.Unmarshal(b, &fastR)
	errS := json.Unmarshal(b, (*slowRef)(&slowR))
	if (errF == nil) != (errS == nil) || !reflect.DeepEqual(fastR, slowR) {
		t.Errorf("Ref of %q: fast %#v, %v; encoding/json %#v, %v", b, fastR, errF, slowR, errS)
	}
	var fastG, slowG GuestUtils
	errF = json.Unmarshal(b, &fastG)
	errS = json.Unmarshal(b, (*slowGuestUtils)(&slowG))
	if (errF == nil) != (errS == nil) || !reflect.DeepEqual(fastG, slowG) {
		t.Errorf("GuestUtils of %q: fast %#v, %v; encoding/json %#v, %v", b, fastG, errF, slowG, errS)
	}
}

// slowRef and slowGuestUtils decode as Ref and GuestUtils did before the fast path: the
// reference the fast path is held to.
type (
	slowRef        Ref
	slowGuestUtils GuestUtils
)

func (r *slowRef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		type plain Ref
		var v plain
		if err := tolerate(json.Unmarshal(b, &v)); err != nil {
			return err
		}
		*r = slowRef(v)
		return nil
	}
	return (*Ref)(r).UnmarshalJSON(b)
}

func (g *slowGuestUtils) UnmarshalJSON(b []byte) error {
	type plain GuestUtils
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			v = plain{}
		} else if err := tolerate(err); err != nil {
			return err
		}
	}
	*g = slowGuestUtils(v)
	return nil
}
