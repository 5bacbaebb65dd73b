package veil

// Fuzz targets of the decoders. They live inside the package because the lenient decoding
// (decodeValue) and the error-body reader are unexported. Each must not panic and must
// round-trip what it accepts: decode, encode, decode again gives the same encoding.

import (
	"bytes"
	"encoding/json"
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
		var env TaskEnvelope
		if err := decodeValue(data, &env); err == nil {
			roundTrip(t, &env)
		}
	})
}
