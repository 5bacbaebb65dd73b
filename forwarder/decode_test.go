// The forwarder's event decoding held to veil.Event's own, and what a page costs to decode.

package forwarder

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// eventCases are events of every shape the lenient rules meet; TestDecodeEventMatchesVeil
// decodes each alone and FuzzDecodeEvents starts from pages of them.
var eventCases = []string{
	`{"id":"e1","type":"warning","created":"2021-08-20T10:08:09.761081Z","extra":{"kept":true},"entities":[{"entity_uuid":"u-1","entity_class":"domain"}]}`,
	`{"id":"e2","message":"a \"quoted\" {brace} [bracket]","type":"info","created":"2021-08-20T10:08:09Z","entities":[]}`,
	` { "ID" : "e3" , "Type":"error", "CREATED": "2021-08-20T10:08:09.1Z", "task": null, "readed": [1, {"a": [2]}], "entities": null } `,
	`{"id":"e\u00e94","type":"ty\npe","created":null}`,
	`{"id":"e5","type":7,"created":"","entities":[{"entity_uuid":5,"entity_class":"node"}]}`,
	`{"id":"e6","entities":"not a list"}`,
	`{"id":"first","id":"last","type":"a","type":"b"}`,
	`{"i\u0064":"escaped key","created":"2021-08-20T10:08:09Z"}`,
	`{}`,
	`{"id":5}`,
	`{"id":"e7","created":12}`,
	`{"id":"e8","created":"not a time"}`,
	`{"id":"e9","entities":[{"id":5}]}`,
	`"a string"`,
	`[1]`,
	`12`,
	`null`,
}

// TestDecodeEventMatchesVeil proves the forwarder's event decoding gives what veil.Event's own
// decoding gives for every field forwarding uses, Raw byte for byte, and fails where it fails.
func TestDecodeEventMatchesVeil(t *testing.T) {
	for _, raw := range eventCases {
		var want veil.Event
		werr := json.Unmarshal([]byte(raw), &want)
		var got veil.Event
		gerr := decodeEvent([]byte(raw), &got)
		if raw == "null" {
			// veil.Event takes null for a zero event; the forwarder refuses it as not an event,
			// and its page decoding publishes it to the invalid subject (TestDecodeEventsKeepsWhatIsNotAnEvent).
			if !errors.Is(gerr, errNotObject) {
				t.Errorf("null: error %v, want %v", gerr, errNotObject)
			}
			continue
		}
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%s: error %v, veil says %v", raw, gerr, werr)
			continue
		}
		if werr != nil {
			continue
		}
		if got.ID != want.ID || got.Type != want.Type || !got.Created.Equal(want.Created.Time) ||
			!reflect.DeepEqual(got.Entities, want.Entities) || string(got.Raw) != strings.TrimSpace(raw) {
			t.Errorf("%s:\n got %+v\nwant %+v", raw, got, want)
		}
	}
}

// TestDecodeEventsKeepsWhatIsNotAnEvent: a page with results that are not events (no id, no
// readable created, not an object) among good ones decodes whole; each odd result is marked with
// its reason, given an id of its body's hash when it has none, and, without a created of its own,
// its older neighbour's (an event without an id has one).
func TestDecodeEventsKeepsWhatIsNotAnEvent(t *testing.T) {
	body := `{"count":7,"results":[` +
		`{"id":"a","created":"2021-08-20T10:00:00Z"},` +
		`{"id":"b","created":"yesterday"},` +
		`{"created":"2021-08-20T10:00:01Z"},` +
		`null,` +
		`{"id":"c","created":"2021-08-20T10:00:02Z"},` +
		`{"id":5,"created":"2021-08-20T10:00:03Z"},` +
		`{"id":"d","created":null}]}`
	pg, err := decodeEvents([]byte(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	want := []struct {
		id, invalid string
		created     time.Time
	}{
		{"a", "", at("2021-08-20T10:00:00Z")},
		{"b", rejectBadCreated, at("2021-08-20T10:00:00Z")},
		{invalidID([]byte(`{"created":"2021-08-20T10:00:01Z"}`)), rejectNoID, at("2021-08-20T10:00:01Z")},
		{invalidID([]byte(`null`)), rejectNotObject, at("2021-08-20T10:00:01Z")},
		{"c", "", at("2021-08-20T10:00:02Z")},
		{invalidID([]byte(`{"id":5,"created":"2021-08-20T10:00:03Z"}`)), rejectNoID, at("2021-08-20T10:00:03Z")},
		{"d", rejectBadCreated, at("2021-08-20T10:00:03Z")},
	}
	if len(pg.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(pg.Results), len(want))
	}
	for i, w := range want {
		g := pg.Results[i]
		if g.ID != w.id || g.Invalid != w.invalid || !g.Created.Equal(w.created) {
			t.Errorf("result %d: id %q invalid %q created %v; want %q %q %v", i, g.ID, g.Invalid, g.Created, w.id, w.invalid, w.created)
		}
	}
}

// BenchmarkDecodePage compares a page of 100 events decoded by veil.Event with the forwarder's
// raw read and walk (cpu-ns/op: the process's CPU time per page, steadier than ns/op on a shared
// machine).
func BenchmarkDecodePage(b *testing.B) {
	var results []json.RawMessage
	for range 100 {
		results = append(results, json.RawMessage(`{"id":"94a08d94-ae84-462f-ab00-3a77a685631c","message":"Virtual machine db-00006: guest agent connected","detail_message":"","user":"system","type":"info","created":"2026-11-22T14:35:57.443037Z","task":null,"readed":[],"entities":[{"entity_uuid":"2dcf774e-e42b-4e19-bec4-4adef46d4da0","entity_class":"domain"}]}`))
	}
	body, _ := json.Marshal(map[string]any{"count": 100, "results": results})
	b.Run("veil.Event", func(b *testing.B) {
		for range b.N {
			var v struct {
				Count   int          `json:"count"`
				Results []veil.Event `json:"results"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw+walk", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU()
		for range b.N {
			if _, err := decodeEvents(body, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
}
