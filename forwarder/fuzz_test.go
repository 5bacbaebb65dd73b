// Fuzz target of the forwarder's page decoding: decodeEvents, the hand-written walk every event of
// a catch-up goes through, is held to veil's own decoding of the same page (DecodePage of
// veil.Event), field by field and error for error.

package forwarder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func FuzzDecodeEvents(f *testing.F) {
	for _, page := range simulatorPages(f) {
		f.Add(page, 0)
		f.Add(page[:len(page)/2], 100) // a truncated answer
	}
	for _, ev := range eventCases {
		f.Add([]byte(`{"count":1,"next":null,"previous":null,"results":[`+ev+`]}`), 7)
	}
	for _, s := range []string{
		`{"count":"2","results":[{"id":"a"},{"id":"b","created":"2021-08-20 10:08:09"}]}`,
		`{"count":0,"results":[]}`, `{"results":[]}`, `{"count":3}`, `{"count":1,"results":null}`,
		`{"count":1,"results":{}}`, `{"count":-1,"results":[null]}`, `{"count":1e3,"results":[[]]}`,
		`[]`, `null`, ``, `<html>502</html>`,
		// Repeated keys and case (the rule at veil.Event.UnmarshalJSON): the last "entities"
		// wins whole, keys fold as encoding/json folds them.
		`{"count":1,"results":[{"id":"a","entities":[{"entity_uuid":"u1","entity_class":"domain"}],"entities":[{"entitY_uuid":"u2"}]}]}`,
		`{"count":1,"results":[{"id":"a","entities":[{"entity_uuid":"u1"},{"entity_uuid":"u3"}],"Entities":[{"entity_class":"node"}]}]}`,
		`{"count":1,"results":[{"id":"a","entities":[{"entity_uuid":"u1"}],"entities":5}]}`,
		`{"count":1,"results":[{"id":"a","entities":[{"entity_uuid":"u1"}],"entities":[5,null,{"entity_uuid":7,"entity_uuid":"u4"}]}]}`,
		`{"count":1,"results":[{"id":"a","entities":[{"entity_uuid":"u1"}],"entities":null}]}`,
		`{"count":1,"results":[{"id":"a","entitieſ":[{"entity_claſſ":"domain"}],"type":"info","TYPE":5}]}`,
	} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, body []byte, offset int) {
		got, gerr := decodeEvents(body, offset)
		want, werr := veil.DecodePage[veil.Event](eventsPath, body, offset)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("error %v, veil says %v", gerr, werr)
		}
		if gerr != nil {
			if at := fmt.Sprintf("(offset %d)", offset); !strings.Contains(gerr.Error(), at) {
				t.Fatalf("error %q does not say %s", gerr, at)
			}
			return
		}
		if got.Count != want.Count || len(got.Results) != len(want.Results) {
			t.Fatalf("count %d, %d results; veil says %d, %d", got.Count, len(got.Results), want.Count, len(want.Results))
		}
		for i, g := range got.Results {
			w := want.Results[i]
			if g.ID != w.ID || g.Type != w.Type || !g.Created.Equal(w.Created.Time) ||
				!reflect.DeepEqual(g.Entities, w.Entities) || !bytes.Equal(g.Raw, w.Raw) {
				t.Fatalf("result %d:\n got %+v\nwant %+v", i, g, w)
			}
			if !json.Valid(g.Raw) { // Raw is the body published as is
				t.Fatalf("result %d: Raw %q is not JSON", i, g.Raw)
			}
		}
	})
}

// simulatorPages are pages of the simulator's journal as the forwarder reads them, in English and
// in Russian (escaped and multi-byte text), with task and entity references.
func simulatorPages(f *testing.F) [][]byte {
	sim := veiltest.New(veiltest.Options{Seed: 7, VMs: 5, InitialEvents: 6, InitialTasks: 3, TaskDuration: time.Millisecond})
	defer sim.Close()
	var pages [][]byte
	for _, lang := range []string{"en", "ru"} {
		req, err := http.NewRequest(http.MethodGet, sim.URL+eventsPath+"?limit=2&offset=1", nil)
		if err != nil {
			f.Fatal(err)
		}
		req.Header.Set("Authorization", "jwt "+sim.Token)
		req.Header.Set("Accept-Language", lang)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			f.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			f.Fatalf("GET %s: %d %s %v", eventsPath, resp.StatusCode, body, err)
		}
		pages = append(pages, body)
	}
	return pages
}
