package veil

// Fuzz targets of the decoders. They live inside the package because the lenient decoding
// (decodeValue) and the error-body reader are unexported. Each must not panic and must
// round-trip what it accepts: decode, encode, decode again gives the same encoding.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// roundTrip checks that v, decoded from data, encodes to something that decodes to the same value.
func roundTrip[T any](t *testing.T, v *T) {
	t.Helper()
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted value does not encode: %v (%+v)", err, v)
	}
	var again T
	if err := decodeValue(first, &again); err != nil {
		t.Fatalf("own encoding %s does not decode: %v", first, err)
	}
	second, err := json.Marshal(&again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("round trip changed the value:\n%s\n%s", first, second)
	}
}

func FuzzDecodeAPIError(f *testing.F) {
	for _, s := range []string{
		`{"errors":[{"code":"50004","msg_key":"detail","detail":"Domain not found"}]}`,
		`{"errors":[{"code":"50004","detail":"URL is not found."}]}`,
		`{"errors":[{"code":"invalid","msg_key":"limit","limit":["A valid integer is required."]}]}`,
		`{"errors":[{"code":"required","msg_key":"node","node":"This field is required."},{"code":"invalid","msg_key":"non_field_errors","non_field_errors":"bad"}]}`,
		`{"detail":"Authentication credentials were not provided."}`,
		`{"errors":[{"code":400}]}`,
		`<html><head><title>502 Bad Gateway</title></head><body><h1>502</h1></body></html>`,
		`<script>alert(1)</script>plain`,
		``, `null`, `[]`, `{"errors":null}`, "\xff\xfe<b>",
	} {
		f.Add(502, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := decodeAPIError(status, body)
		msg := e.Error()
		if e.StatusCode != status || msg == "" {
			t.Fatalf("decodeAPIError(%d) = %+v", status, e)
		}
		if utf8.RuneCountInString(e.Snippet) > maxSnippet || strings.Contains(e.Snippet, "<") && !bytes.Contains(body, []byte("&")) {
			t.Fatalf("snippet %q is not short plain text", e.Snippet)
		}
		if e.Code == "" && e.Message == "" || e.MsgKey == "code" || e.MsgKey == "msg_key" {
			return
		}
		// Round trip: the error body ({"errors":[...]}) written from what was understood reads back the same.
		item := map[string]string{"code": e.Code, "msg_key": e.MsgKey}
		if e.MsgKey != "" {
			item[e.MsgKey] = e.Message
		}
		again := decodeAPIError(status, mustJSON(t, map[string]any{"errors": []any{item}}))
		if again.Code != e.Code || again.MsgKey != e.MsgKey || again.Field != e.Field ||
			(e.MsgKey != "" && again.Message != e.Message && !strings.Contains(e.Message, "; ")) {
			t.Fatalf("round trip: %+v became %+v", e, again)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"id":"6c1e0d6e-5b0e-4a57-9d0a-6f4f2a1c7f10","message":"vm1: started","detail_message":"","user":"admin","type":"info","created":"2021-08-20T10:08:09.761081Z","task":null,"readed":[],"entities":[{"entity_uuid":"a","entity_class":"domain"}]}`,
		`{"id":"e","created":"2021-08-20T10:08:09","entities":{},"user":{"id":1}}`,
		`{"id":"e","created":""}`, `{"id":5}`, `{"created":"bad"}`, `[]`, `null`, `{"id":"e","task":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev Event
		if err := decodeValue(data, &ev); err != nil {
			return
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			return // null leaves the event untouched
		}
		if !bytes.Equal(ev.Raw, bytes.TrimSpace(data)) {
			t.Fatalf("Raw %q is not the input %q", ev.Raw, data)
		}
		roundTrip(t, &ev)
	})
}

func FuzzDecodeDomain(f *testing.F) {
	for _, s := range []string{
		`{"id":"d1","verbose_name":"vm","status":"ACTIVE","user_power_state":3,"cpu_count":"2","memory_count":4096,"node":{"id":"n1","verbose_name":"node1"},"parent":null,"template":false,"thin":true,"guest_utils":{"veil_state":false,"version":"101.1.0","hostname":"h","ipv4":["10.0.0.1"],"interfaces":["eth0"],"qemu_state":true},"cpu_used_percent_user":"12.5","mem_used_percent_user":null,"cluster":"c1"}`,
		`{"id":"d2","guest_utils":{},"node":"n1","parent":{"id":"t"}}`,
		`{"id":"d3","cpu_count":{"v":1}}`, `{"id":"d4","template":"yes","guest_utils":""}`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Domain
		if err := decodeValue(data, &d); err != nil {
			return
		}
		roundTrip(t, &d)
	})
}

func FuzzDecodeTask(f *testing.F) {
	for _, s := range []string{
		`{"id":"t1","verbose_name":"Start","name":"start","status":"IN_PROGRESS","progress":40,"created":"2021-08-20T10:08:09.761081Z","finished_time":null,"executed":0,"error_message":"","entities":{"d1":"domain"}}`,
		`{"id":"t2","status":"SUCCESS","progress":"100","executed":"2.492376","finished_time":"2021-08-20T10:08:12.253457Z"}`,
		`{"_task":{"id":"t3","status":"FAILED"},"_entity":{"id":"d"}}`, `{"_task":{"id":"t4"},"entity":"d"}`,
		`{"id":"t5","executed":[1]}`, `{"id":"t6","created":"2021-13-45"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var task Task
		if err := decodeValue(data, &task); err == nil {
			roundTrip(t, &task)
		}
	})
}

// FuzzDecodeListPage holds the listing's decoder (decodeListPage, what List and the inventory's
// reads use) to "one bad object among good ones costs only itself": the page decoded as it is,
// and again with an object that cannot decode inserted among its results, gives the same
// objects, and one rejection more. Each object kept is what decoding its result alone gives.
func FuzzDecodeListPage(f *testing.F) {
	for _, s := range []string{
		`{"count":2,"next":null,"previous":null,"results":[{"id":"d1","verbose_name":"a","memory_count":"4096","node":{"id":"n1","verbose_name":"x"},"guest_utils":{}},{"id":"d2","cpu_count":2,"parent":{"id":"t"}}]}`,
		`{"count":"3","results":[{"id":"d1"},{"id":"d2","memory_count":"n/a"},{"verbose_name":"no id"}]}`,
		`{"count":1,"results":[{"id":"a","verbose_name":"x"}],"results":[{"id":"b"}]}`,
		`{"count":1,"results":[{"id":"a","ID":"b","template":"yes"}]}`,
		`{"count":2,"results":[["x"],{"id":5},{"id":"c","tags":[{"verbose_name":"t","colour":"red"},"u"]}]}`,
		`{"count":0,"results":[]}`, `{"results":[]}`, `{"count":1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s), uint8(1), uint8(0))
	}
	bads := []string{`{"id":"bad","memory_count":"n/a"}`, `["not","an","object"]`, `{"verbose_name":"nameless"}`, `{"id":{"x":1}}`, `7`}
	f.Fuzz(func(t *testing.T, body []byte, at, which uint8) {
		var told []Rejection
		c := &Client{rejected: func(r Rejection) { told = append(told, r) }}
		p, err := decodeListPage[Domain](c, "/api/domains/", body, 0)
		env, eerr := decodeEnvelope(body)
		if (err == nil) != (eerr == nil) {
			t.Fatalf("page error %v, envelope error %v", err, eerr)
		}
		if err != nil {
			return
		}
		if len(p.Results)+len(told) != len(env.Results) {
			t.Fatalf("%d results: %d kept, %d told", len(env.Results), len(p.Results), len(told))
		}
		// Each object kept is its result decoded alone.
		k := 0
		for _, raw := range env.Results {
			var d Domain
			if decodeValue(raw, &d) != nil || d.ID == "" {
				continue
			}
			if !reflect.DeepEqual(d, p.Results[k]) {
				t.Fatalf("result %s decoded alone %+v, in the page %+v", raw, d, p.Results[k])
			}
			k++
		}
		// The same page with one bad object among its results.
		results := slices.Clone(env.Results)
		i := int(at) % (len(results) + 1)
		results = slices.Insert(results, i, json.RawMessage(bads[int(which)%len(bads)]))
		again, err := json.Marshal(map[string]any{"count": env.Count, "results": results})
		if err != nil {
			t.Fatal(err)
		}
		before := len(told)
		p2, err := decodeListPage[Domain](c, "/api/domains/", again, 0)
		if err != nil {
			t.Fatalf("with one bad object the page fails: %v", err)
		}
		if len(told) != 2*before+1 { // the page's own again, and the bad one
			t.Fatalf("told %+v after %d, want one rejection more", told[before:], before)
		}
		for _, r := range told {
			if r.Collection != "domains" || r.Reason == "" || r.Err == nil || r.Count != 1 {
				t.Fatalf("told %+v", r)
			}
		}
		if !reflect.DeepEqual(p.Results, p2.Results) {
			t.Fatalf("one bad object changed the others:\n%+v\n%+v", p.Results, p2.Results)
		}
	})
}
