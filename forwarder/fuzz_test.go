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
	// The property: the envelope fails where veil's fails; within a page, each result veil.Event
	// reads as an event (an id, a created) is decoded as veil decodes it, whatever the other
	// results hold (one bad result costs only itself); every other result is kept, marked
	// Invalid, with an id and the created of a readable neighbour (or none).
	f.Fuzz(func(t *testing.T, body []byte, offset int) {
		got, gerr := decodeEvents(body, offset)
		env, werr := veil.DecodePage[json.RawMessage](eventsPath, body, offset)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("error %v, veil says %v", gerr, werr)
		}
		if gerr != nil {
			if at := fmt.Sprintf("(offset %d)", offset); !strings.Contains(gerr.Error(), at) {
				t.Fatalf("error %q does not say %s", gerr, at)
			}
			return
		}
		if got.Count != env.Count || len(got.Results) != len(env.Results) {
			t.Fatalf("count %d, %d results; veil says %d, %d", got.Count, len(got.Results), env.Count, len(env.Results))
		}
		createds := map[time.Time]bool{}
		for i, g := range got.Results {
			var w veil.Event
			err := json.Unmarshal(env.Results[i], &w)
			readable := err == nil && string(bytes.TrimSpace(env.Results[i])) != "null" && w.ID != "" && !w.Created.IsZero()
			if !bytes.Equal(g.Raw, bytes.TrimSpace(env.Results[i])) || !json.Valid(g.Raw) { // Raw is the body published
				t.Fatalf("result %d: Raw %q, want %q", i, g.Raw, env.Results[i])
			}
			if !g.Created.IsZero() {
				createds[g.Created.Time] = true
			}
			if !readable {
				if g.Invalid == "" || g.ID == "" {
					t.Fatalf("result %d (%s) is not an event (veil: %v, %+v) but decodes as one: %+v", i, env.Results[i], err, w, g)
				}
				continue
			}
			if g.Invalid != "" || g.ID != w.ID || g.Type != w.Type || !g.Created.Equal(w.Created.Time) || !reflect.DeepEqual(g.Entities, w.Entities) {
				t.Fatalf("result %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
		for i, g := range got.Results {
			if g.Invalid != "" && !g.Created.IsZero() && !createds[g.Created.Time] {
				t.Fatalf("result %d: created %v is no readable neighbour's", i, g.Created)
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

// FuzzBoundBody: whatever the event body (JSON or not) and the budget, boundBody ends, and what
// it gives is JSON: the same object within the budget (but for what it must keep: id, type and
// created of at most 64 bytes each), and the fields it cut are named.
func FuzzBoundBody(f *testing.F) {
	for _, ev := range eventCases {
		f.Add([]byte(ev), 16)
	}
	f.Add([]byte(`{"id":"e","message":"`+strings.Repeat(`\u0444`, 500)+`","detail_message":"`+strings.Repeat("x<>&", 300)+`"}`), 200)
	f.Add([]byte(`{"id":"e","a":[1,2,3,{"b":"`+strings.Repeat("y", 1000)+`"}],"type":"`+strings.Repeat("t", 300)+`"}`), 100)
	f.Fuzz(func(t *testing.T, raw []byte, budget int) {
		budget = 64 + budget%4096
		if budget < 64 {
			budget += 4096
		}
		out, cut := boundBody(raw, budget)
		if !json.Valid(out) {
			t.Fatalf("not JSON: %q", out)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(out, &obj) != nil {
			t.Fatalf("not an object: %q", out)
		}
		kept := 0
		for k, v := range obj {
			if keepField(k) {
				kept += len(k) + len(v) + 4
			}
		}
		if len(out) > budget && len(out) > kept+2 {
			t.Fatalf("%d bytes for a budget of %d (%d kept): %q", len(out), budget, kept, out)
		}
		var in, got any
		if len(cut) == 0 && json.Unmarshal(raw, &in) == nil && json.Unmarshal(out, &got) == nil && !reflect.DeepEqual(in, got) {
			t.Fatalf("changed %q into %q but names no field cut", raw, out)
		}
	})
}
