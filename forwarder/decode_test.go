// The forwarder's event decoding held to veil.Event's own, and what a page costs to decode.

package forwarder

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

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

// BenchmarkDecodePage compares a page of 100 events decoded by veil.Event with the forwarder's
// raw read and walk.
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
		for range b.N {
			if _, err := decodeEvents(body, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
