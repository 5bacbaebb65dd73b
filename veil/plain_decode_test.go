package veil

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// viaEncodingJSON is the page as encoding/json decodes it (decodePageFast without the plain
// scanner).
func viaEncodingJSON[T any](body []byte) (Page[T], bool) {
	if resultsKeys(body) > 1 {
		return decodePageAs[T, lastList[T]](body)
	}
	return decodePageAs[T, []T](body)
}

// samePlain checks that a page the plain scanner reads is the page encoding/json gives.
func samePlain[T any](t *testing.T, body []byte) bool {
	t.Helper()
	got, ok := decodePagePlain[T](body)
	if !ok {
		return false
	}
	want, wok := viaEncodingJSON[T](body)
	if !wok {
		t.Fatalf("%T: the plain scanner read a page encoding/json rejects: %q", got.Results, body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%T: page %q:\nplain         %+v\nencoding/json %+v", got.Results, body, got, want)
	}
	return true
}

// plainSeeds are pages of the platform's shape and of the odd shapes the plain scanner must
// leave to encoding/json (or read exactly as it does).
var plainSeeds = []string{
	`{"count":2,"next":"http://x/?limit=2\u0026offset=2","previous":null,"results":[{"id":"a","verbose_name":"tpl-01","memory_count":8192,"cpu_count":4,"status":"ACTIVE","user_power_state":1,"node":{"id":"n","verbose_name":"node-1"},"parent":null,"template":true,"thin":false,"resource_pool":null,"guest_utils":{"veil_state":false,"version":"1","hostname":"h","ipv4":["10.0.0.3"],"interfaces":["eth0"],"qemu_state":false},"cpu_used_percent_user":"0.00","mem_used_percent_user":"12.5","vdisks_count":3,"tags":[]},{"id":"b","parent":{"id":"p"},"tags":["x",{"verbose_name":"y","colour":"red"}],"resource_pool":"rp","cpu_used_percent_user":null}]}`,
	`{"count":1,"results":[{"id":"v","verbose_name":"d1","status":"ACTIVE","size":53.66,"virtual_size":60,"datapool":{"id":"p","verbose_name":"pool","type":"gluster"},"vdisk":{"id":"a","verbose_name":"vm"},"hints":0}]}`,
	`{"count":1,"results":[{"id":"i","name":"net0","vmachine_info":{"id":"a","verbose_name":"vm"},"mac_address":"52:54","nic_driver":"virtio","status":"ACTIVE","vmachine_name":"vm","vnetwork_info":{"id":"n","verbose_name":"Default","entity_type":"vnetworks"}}]}`,
	`{"count":1,"results":[{"id":"p","verbose_name":"pool-1","status":"ACTIVE","type":"local","size":15728640,"used_space":"7","free_space":8478050,"nodes_connected":[{"connection_status":"SUCCESS","id":"n","verbose_name":"node-001"}],"vdisk_count":413,"file_count":16,"iso_count":12}]}`,
	`{"count":1,"results":[{"id":"n","verbose_name":"node-001","cpu_count":96,"memory_count":131072,"status":"ACTIVE","management_ip":"10.0.0.2","domains_count":26,"domains_on_count":20,"cluster":{"id":"c","verbose_name":"cluster-1"},"datacenter_name":"Default","datacenter_id":"d","cpu_used_percent_user":"78.62","mem_used_percent_user":"57.98","created":"x"}]}`,
	`{"count":1,"results":[{"id":"n","uptime":5,"ballooning":true}]}`,
	`{"count":1,"results":[{"id":"p","nodes_connected":null,"size":null},{"id":"q","nodes_connected":{"a":1},"tags":["t"],"node":{"id":"n","verbose_name":"x","other":1}}]}`,
	`{"count":0,"results":[]}`, ` { "count" : 3 , "results" : [ { "id" : "x" } ] } `, `{"count":1,"results":null}`,
	`{"count":1}`, `{"results":[]}`, `{"count":"1","results":[]}`, `{"Count":1,"results":[]}`, `{"count":1,"results":[],"results":[{"id":"a"}]}`,
	`{"count":1,"results":[{"id":"a"}]} x`, `{"count":01,"results":[]}`, `{"count":1e999,"results":[]}`, `{"count":-0.5e+2,"results":[]}`,
	`{"count":1,"results":[{"id":"a","ID":"b"}]}`, `{"count":1,"results":[{"id":"a","id":"b","id":null}]}`, `{"count":1,"results":[{"id":"\u00e9\"x"}]}`,
	`{"count":1,"results":[{"id":"a\xffb"}]}`, "{\"count\":1,\"results\":[{\"id\":\"a\tb\"}]}", `{"count":1,"results":[{"id":1}]}`,
	`{"count":1,"results":[{"id":"a","cpu_count":"  3 "}]}`, `{"count":1,"results":[{"id":"a","cpu_count":"\u0033"}]}`, `{"count":1,"results":[{"id":"a","cpu_count":""}]}`,
	`{"count":1,"results":[{"id":"a","cpu_count":"NaN"}]}`, `{"count":1,"results":[{"id":"a","cpu_count":null,"memory_count":1.}]}`, `{"count":1,"results":[{"id":"a","cpu_count":0x10}]}`,
	`{"count":1,"results":[{"id":"a","other":{"deep":[1,2,{"x":null}],"s":"\ud83d\ude00"},"ſtatus":"x"}]}`, `{"count":1,"results":[{"id":"a","statuſ":"x"}]}`,
	`{"count":1,"results":[{"id":"a","template":"true"}]}`, `{"count":1,"results":[{"id":"a","template":true,"template":null}]}`,
	`{"count":1,"results":[{"id":"a","node":"uuid","parent":"p2","guest_utils":[]}]}`, `{"count":1,"results":[{"id":"a","node":null,"guest_utils":null,"tags":null}]}`,
	`{"count":1,"results":[{"id":"a","cpu_topology":{"cpu_count":8}}]}`, `{"count":1,"results":[{"id":"a","os_type":"linux","permissions":["x"]}]}`,
	`{"count":1,"results":[{"id":"v","size":null,"virtual_size":"60","datapool":null,"vdisk":null,"created":"2021-08-20T10:08:09Z","target_bus":"virtio","ssd":true}]}`,
	`{"count":1,"results":[{"id":"v","datapool":{"id":"p","ID":"q"}}]}`, `{"count":1,"results":[{"id":"v","datapool":{"id":"p"},"datapool":{"type":"t"}}]}`,
	`{"count":1,"results":[{"id":"i","vnetwork_info":{"id":"n"},"vnetwork_info":{"verbose_name":"v"},"node_info":null,"link_state":"up"}]}`,
	`{"count":1,"results":[{"id":"i","vnetwork_info":null}]}`, `{"count":1,"results":[{"id":"i","vnetwork_info":"n"}]}`,
	`{"count":2,"results":[null,1,"x",[],{"id":"e","type":"t"}]}`, `{"count":1,"results":[{"a":[}]}`, `{"count":1,"results":[{"a":"\x"}]}`, `{"count":1,"results":[{"a":tru}]}`,
	`{"count":1,"results":[{"a":"\u12"}]}`, `{"count":1,"results":[{"a":-}]}`, `{"count":1,"results":[{"a":1.5e}]}`, `{"count":1,"results":[{"a":[1,]}]}`, `{"count":1,"results":[{"a":{"b":1,}}]}`,
	`{"count":1,"results":[1 2]}`, `{"count":1,"results":[{"id":"a"},]}`, `{"count":1,"results":[{"id":"a"}],}`, `{"count":1,,"results":[]}`, `{"count":1 "results":[]}`,
}

func FuzzPlainPage(f *testing.F) {
	for _, s := range plainSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		samePlain[Domain](t, body)
		samePlain[Vdisk](t, body)
		samePlain[VMachineInf](t, body)
		samePlain[json.RawMessage](t, body)
		samePlain[Node](t, body)
		samePlain[Datapool](t, body)
		if _, ok := decodePagePlain[Task](body); ok {
			t.Fatal("a type without a plain decoder read plainly")
		}
	})
}

// TestPlainReadsThePlatformsPages: the pages the platform sends (the first seeds: domains,
// disks, interfaces, datapools, nodes) are read by the plain scanner, else a refresh pays
// encoding/json again, each as encoding/json reads it.
func TestPlainReadsThePlatformsPages(t *testing.T) {
	b := func(i int) []byte { return []byte(plainSeeds[i]) }
	for i, read := range []bool{samePlain[Domain](t, b(0)), samePlain[Vdisk](t, b(1)), samePlain[VMachineInf](t, b(2)),
		samePlain[Datapool](t, b(3)), samePlain[Node](t, b(4))} {
		if !read || !samePlain[json.RawMessage](t, b(i)) {
			t.Errorf("seed %d not read plainly", i)
		}
	}
}

// numberViaUnmarshal is Number's rule read through json.Unmarshal, as it was before the plain
// strings were read without it.
func numberViaUnmarshal(b []byte) (Number, bool) {
	b = bytes.TrimSpace(b)
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if json.Unmarshal(b, &s) != nil {
			return 0, false
		}
		if s = strings.TrimSpace(s); s == "" {
			return 0, true
		}
	} else if s == "null" {
		return 0, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return Number(f), true
}

func FuzzNumber(f *testing.F) {
	for _, s := range []string{`"0.00"`, `" 3 "`, `""`, `"  "`, `"\u0033"`, `"a"b"`, `"1e999"`, `"NaN"`, `"0x10"`, "\"\t1\"", `"1_0"`, `12`, `null`, `"-0"`, `"+1"`, `"-0.00"`, `"1.50"`, `".5"`, `"5."`, `"-.5"`, `"123456789012345"`, `"1234567890123456"`, `"0.000000000000001"`, `-12.25`, `007`, `" "`, `"`, `""""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var n Number
		err := n.UnmarshalJSON(b)
		want, ok := numberViaUnmarshal(b)
		if (err == nil) != ok || ok && n != want && !(n != n && want != want) {
			t.Fatalf("%q: got %v, %v; want %v, ok %v", b, n, err, want, ok)
		}
	})
}

// timeViaUnmarshal is Time's rule read through json.Unmarshal, as it was before plain strings
// were read without it.
func timeViaUnmarshal(b []byte) (Time, bool) {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return Time{}, true
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return Time{}, false
	}
	if s = strings.TrimSpace(s); s == "" {
		return Time{}, true
	}
	for _, layout := range timeLayouts {
		if v, err := time.Parse(layout, s); err == nil {
			return Time{v}, true
		}
	}
	return Time{}, false
}

func FuzzTime(f *testing.F) {
	for _, s := range []string{`"2021-08-20T10:08:09.761081Z"`, `"2021-08-20 10:08:09"`, `" 2021-08-20 "`, `""`, `null`, `"\u0032021-08-20"`, `"a"b"`, "\"2021-08-20\t\"", `5`, `"2021-08-20T10:08:09+03:00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got Time
		err := got.UnmarshalJSON(b)
		want, ok := timeViaUnmarshal(b)
		if (err == nil) != ok || ok && !got.Equal(want.Time) {
			t.Fatalf("%q: got %v, %v; want %v, ok %v", b, got, err, want, ok)
		}
	})
}

// tagViaUnmarshal is Tag's rule read through encoding/json alone, as it was before plain
// strings and objects were read without it.
func tagViaUnmarshal(b []byte) (Tag, bool) {
	var s string
	if json.Unmarshal(b, &s) == nil {
		return Tag{Name: s}, true
	}
	var o struct {
		VerboseName string `json:"verbose_name"`
		Colour      string `json:"colour"`
	}
	if json.Unmarshal(b, &o) != nil {
		return Tag{}, false
	}
	return Tag{Name: o.VerboseName, Colour: o.Colour}, true
}

func FuzzTag(f *testing.F) {
	for _, s := range []string{`"prod"`, `{"verbose_name":"prod","colour":"#ff0000"}`, `{"colour":null,"verbose_name":"a","x":[1]}`, `{"Colour":"x"}`, `{"colour":5}`, `{"colour":true}`, `{"verbose_name":"a","verbose_name":"b"}`, `{"x":{"y":1}}`, `{"verbose_name":"\u00e9"}`, `{}`, ` {} `, `null`, `5`, `[]`, `"a\"b"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // UnmarshalJSON is handed valid JSON only
		}
		var got Tag
		err := got.UnmarshalJSON(b)
		want, ok := tagViaUnmarshal(b)
		if (err == nil) != ok || ok && got != want {
			t.Fatalf("%q: got %+v, %v; want %+v, ok %v", b, got, err, want, ok)
		}
	})
}
