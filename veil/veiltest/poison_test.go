package veiltest

// This file holds the tests of the bad input the simulator serves on request (poison.go): each
// poison event in the journal as the platform would hold it, an odd field in one object of a
// collection (list, detail, push), and hostile guest-agent answers; all through /_sim/ too.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// allEvents reads the whole journal in created order through the API, as raw objects.
func allEvents(t *testing.T, c *client) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for off := 0; ; off += 100 {
		st, b := c.do("GET", fmt.Sprintf("/api/events/?ordering=created&limit=100&offset=%d", off), nil)
		if st != 200 {
			t.Fatalf("events page at %d: %d %.200s", off, st, b)
		}
		var page struct {
			Count   int                          `json:"count"`
			Results []map[string]json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("events page at %d: %v", off, err)
		}
		out = append(out, page.Results...)
		if len(page.Results) < 100 {
			return out
		}
	}
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// control posts body to a /_sim/ endpoint and decodes the answer into v (when not nil).
func control(t *testing.T, c *client, path string, body any, v any) {
	t.Helper()
	st, b := c.do("POST", path, body)
	if st != 200 {
		t.Fatalf("POST %s: %d %s", path, st, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, b)
		}
	}
}

// TestPoisonEventsAreInTheJournal: every kind of bad event, added through /_sim/events/poison
// between good ones, is listed by GET /api/events/ at its place in its bad wire form, and its
// detail answers by its key; the good events around it are as usual.
// poisonCase is a kind of poison event, its options, and what the journal must then hold.
type poisonCase struct {
	kind  string
	body  map[string]any
	check func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo)
}

func TestPoisonEventsAreInTheJournal(t *testing.T) {
	for _, c := range poisonCases() {
		t.Run(c.kind, func(t *testing.T) {
			s, cl := newSim(t, Options{VMs: 3, InitialEvents: -1, InitialTasks: -1})
			before := s.AddEvents(3, EventSpec{Type: "info"})
			body := map[string]any{"kind": c.kind}
			for k, v := range c.body {
				body[k] = v
			}
			var info PoisonEventInfo
			control(t, cl, "/_sim/events/poison", body, &info)
			after := s.AddEvents(3, EventSpec{Type: "warning"})
			evs := allEvents(t, cl)
			if len(evs) != 7 {
				t.Fatalf("%d events in the journal, want 7", len(evs))
			}
			for i, id := range append(append(before, ""), after...) {
				if i == 3 {
					continue
				}
				if got := str(evs[i]["id"]); got != id {
					t.Fatalf("event %d is %q, want the good event %q", i, got, id)
				}
			}
			bad := evs[3]
			if c.kind != PoisonNoID && str(bad["id"]) != info.ID {
				t.Fatalf("the 4th event is %s, want the poison one %s", bad["id"], info.ID)
			}
			c.check(t, bad, info)
			st, b := cl.do("GET", "/api/events/"+info.Key+"/", nil)
			if st != 200 || len(b) != info.Size {
				t.Errorf("detail of %s: %d, %d bytes, want 200 and the %d bytes the answer named", info.Key, st, len(b), info.Size)
			}
			// The default order (newest first) has it at its place too.
			if got, _ := results(t, cl.json("GET", "/api/events/?limit=4", nil, 200))[3]["id"].(string); got != str(bad["id"]) {
				t.Errorf("newest first, 4th event %q, want %q", got, str(bad["id"]))
			}
		})
	}
	t.Run("unknown kind", func(t *testing.T) {
		_, cl := newSim(t, Options{VMs: 1})
		if st, b := cl.do("POST", "/_sim/events/poison", map[string]any{"kind": "cursed"}); st != 400 {
			t.Fatalf("unknown kind answered %d %s", st, b)
		}
	})
}

// poisonCases are the rows of TestPoisonEventsAreInTheJournal.
func poisonCases() []poisonCase {
	return []poisonCase{
		{PoisonHugeDetail, map[string]any{"size": DefaultHugeDetail}, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if n := len(str(e["detail_message"])); n != DefaultHugeDetail {
				t.Errorf("detail_message of %d bytes, want %d", n, DefaultHugeDetail)
			}
			if info.Size <= DefaultHugeDetail {
				t.Errorf("size %d: want the whole event's JSON, more than its detail", info.Size)
			}
		}},
		{PoisonLongType, map[string]any{"size": 5000}, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if typ := str(e["type"]); len(typ) != 5000 || typ != info.Type {
				t.Errorf("type of %d characters (answer says %d), want 5000", len(typ), len(info.Type))
			}
		}},
		{PoisonBadCreated, map[string]any{"created": "2026-13-45T99:00:00Z"}, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if got := str(e["created"]); got != "2026-13-45T99:00:00Z" || info.Created != got {
				t.Errorf("created %q (answer %q)", got, info.Created)
			}
		}},
		{PoisonBadCreated, nil, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if got := str(e["created"]); got != DefaultBadCreated {
				t.Errorf("created %q, want %q", got, DefaultBadCreated)
			}
		}},
		{PoisonNullCreated, nil, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if string(e["created"]) != "null" || info.Created != "null" {
				t.Errorf("created %s (answer %q), want null", e["created"], info.Created)
			}
		}},
		{PoisonNoCreated, nil, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if _, ok := e["created"]; ok || info.Created != "" {
				t.Errorf("created %s (answer %q), want no key", e["created"], info.Created)
			}
		}},
		{PoisonNoID, nil, func(t *testing.T, e map[string]json.RawMessage, info PoisonEventInfo) {
			if _, ok := e["id"]; ok || info.ID != "" || info.Key == "" {
				t.Errorf("id %s (answer id %q key %q), want no key and a journal key", e["id"], info.ID, info.Key)
			}
		}},
	}
}

// TestFutureEventGoesLastAsOrderingByCreatedPutsIt: an event dated an hour ahead stays after
// the events written after it (ordering=created), and first in the default order: where a
// client reading the journal of a controller whose clock jumped finds it.
func TestFutureEventGoesLastAsOrderingByCreatedPutsIt(t *testing.T) {
	clock := &simClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	s, cl := newSim(t, Options{VMs: 3, InitialEvents: -1, InitialTasks: -1, Now: clock.Now})
	before := s.AddEvents(2, EventSpec{})
	var info PoisonEventInfo
	control(t, cl, "/_sim/events/poison", map[string]any{"kind": PoisonFuture, "offset": "1h"}, &info)
	if want := ts(clock.Now().Add(time.Hour)); info.Created != want {
		t.Fatalf("future event created %s, want %s", info.Created, want)
	}
	clock.Add(time.Second)
	after := s.AddEvents(3, EventSpec{})
	clock.Add(time.Second)
	if err := s.PowerOff(s.DomainIDs()[1]); err != nil { // an event the model writes
		t.Fatal(err)
	}
	evs := allEvents(t, cl)
	var ids, created []string
	for _, e := range evs {
		ids, created = append(ids, str(e["id"])), append(created, str(e["created"]))
	}
	want := append(append(append([]string{}, before...), after...), "", info.ID)
	if len(ids) != len(want) {
		t.Fatalf("journal %v, want %d events", ids, len(want))
	}
	for i, id := range want {
		if id != "" && ids[i] != id {
			t.Fatalf("journal by created %v\nwant %v (the future event last)", ids, want)
		}
	}
	for i := 1; i < len(created); i++ {
		if created[i] < created[i-1] {
			t.Fatalf("created goes backwards at %d: %v", i, created)
		}
	}
	if created[len(created)-2] != ts(clock.Now()) {
		t.Errorf("the model's event is dated %s, want now %s (not clamped to the future one)", created[len(created)-2], ts(clock.Now()))
	}
	if got, _ := results(t, cl.json("GET", "/api/events/?limit=1", nil, 200))[0]["id"].(string); got != info.ID {
		t.Errorf("newest first starts with %s, want the future event %s", got, info.ID)
	}
	// Once the clock passes it, new events go after it again.
	clock.Add(2 * time.Hour)
	late := s.AddEvents(1, EventSpec{})
	if evs := allEvents(t, cl); str(evs[len(evs)-1]["id"]) != late[0] {
		t.Errorf("an event after the future one's time is not last")
	}
}

// TestManyEventsAtOneInstant: /_sim/events with same_created writes thousands of events that
// share one created instant, listed in the order written.
func TestManyEventsAtOneInstant(t *testing.T) {
	_, cl := newSim(t, Options{VMs: 3, InitialEvents: -1, InitialTasks: -1})
	var ans struct{ IDs []string }
	control(t, cl, "/_sim/events", map[string]any{"n": 3000, "same_created": true}, &ans)
	evs := allEvents(t, cl)
	if len(evs) != 3000 || len(ans.IDs) != 3000 {
		t.Fatalf("%d events listed, %d answered, want 3000", len(evs), len(ans.IDs))
	}
	for i, e := range evs {
		if str(e["created"]) != str(evs[0]["created"]) || str(e["id"]) != ans.IDs[i] {
			t.Fatalf("event %d: %s at %s, want %s at %s", i, e["id"], e["created"], ans.IDs[i], evs[0]["created"])
		}
	}
}

// TestOddFieldInEveryAnswer: one VM's memory_count "n/a" shows in the listing, the detail and
// its push frames (change log), the other VMs unchanged; any collection works, nested fields
// and removal too; [] restores every object.
func TestOddFieldInEveryAnswer(t *testing.T) {
	s, cl := newSim(t, Options{VMs: 5, ChangeLog: 100, NoPush: false})
	ids := s.DomainIDs()
	odd := ids[2]
	seq := s.Summary().Changes
	control(t, cl, "/_sim/odd_fields", []map[string]any{
		{"collection": "domains", "id": odd, "field": "memory_count", "value": "n/a"},
		{"collection": "domains", "id": odd, "field": "node.id", "value": 42},
		{"collection": "nodes", "id": s.NodeIDs()[0], "field": "cpu_count", "remove": true},
	}, nil)
	page := results(t, cl.json("GET", "/api/domains/?limit=100", nil, 200))
	if len(page) != 5 {
		t.Fatalf("%d VMs listed", len(page))
	}
	for _, d := range page {
		mc := d["memory_count"]
		if d["id"] == odd {
			if mc != "n/a" || d["node"].(map[string]any)["id"] != float64(42) {
				t.Errorf("odd VM listed with memory_count %v, node %v", mc, d["node"])
			}
		} else if _, isNum := mc.(float64); !isNum {
			t.Errorf("VM %v listed with memory_count %v", d["id"], mc)
		}
	}
	if d := cl.json("GET", "/api/domains/"+odd+"/", nil, 200); d["memory_count"] != "n/a" {
		t.Errorf("odd VM's detail has memory_count %v", d["memory_count"])
	}
	if d := cl.json("GET", "/api/domains/"+ids[0]+"/", nil, 200); d["memory_count"] == "n/a" {
		t.Errorf("another VM's detail is odd too")
	}
	// fields= and ordering still apply, to the odd answer.
	if d := results(t, cl.json("GET", "/api/domains/?fields=id,memory_count&ids="+odd, nil, 200)); len(d) != 1 || d[0]["memory_count"] != "n/a" || len(d[0]) != 2 {
		t.Errorf("fields= on the odd VM: %v", d)
	}
	n := results(t, cl.json("GET", "/api/nodes/", nil, 200))[0]
	if _, ok := n["cpu_count"]; ok {
		t.Errorf("node listed with cpu_count, want it removed")
	}
	var pushed bool
	for _, c := range s.Changes(seq) {
		if c.ID == odd && strings.Contains(string(c.Object), `"memory_count":"n/a"`) {
			pushed = true
		}
	}
	if !pushed {
		t.Errorf("the odd VM was not pushed with its odd field: %d changes", len(s.Changes(seq)))
	}
	control(t, cl, "/_sim/odd_fields", []any{}, nil)
	if d := cl.json("GET", "/api/domains/"+odd+"/", nil, 200); d["memory_count"] == "n/a" {
		t.Errorf("odd field stays after [] was set")
	}
	if st, b := cl.do("POST", "/_sim/odd_fields", []map[string]any{{"collection": "domains", "field": "x", "value": 1}}); st != 400 {
		t.Errorf("an odd field without id answered %d %s", st, b)
	}
	// Device collections and events are collections like the others.
	var vd struct {
		Results []map[string]any
	}
	if err := json.Unmarshal(mustGet(t, cl, "/api/vdisks/?limit=1"), &vd); err != nil || len(vd.Results) != 1 {
		t.Fatalf("vdisks: %v", err)
	}
	vid := vd.Results[0]["id"].(string)
	control(t, cl, "/_sim/odd_fields", []map[string]any{{"collection": "vdisks", "id": vid, "field": "size", "value": `"big"`}}, nil)
	if d := results(t, cl.json("GET", "/api/vdisks/?limit=1", nil, 200))[0]; d["size"] != `"big"` {
		t.Errorf("vdisk size %v", d["size"])
	}
}

func mustGet(t *testing.T, c *client, path string) []byte {
	t.Helper()
	st, b := c.do("GET", path, nil)
	if st != 200 {
		t.Fatalf("GET %s: %d %s", path, st, b)
	}
	return b
}

// TestGuestHostileAnswers: a VM's agent answers guest-get-fsinfo with thousands of
// filesystems, overlong strings, one filesystem of wrong types, or any raw JSON; the other
// VMs and the other commands answer as usual; kind "" answers normally again.
func TestGuestHostileAnswers(t *testing.T) {
	s, cl := newSim(t, Options{Seed: 5, VMs: 6, Templates: -1, RunningFraction: 1, AgentFraction: 1, LinuxFraction: 1})
	ids := s.DomainIDs()
	vm, other := ids[0], ids[1]
	fsinfo := func(id string) any {
		t.Helper()
		v := cl.json("POST", "/api/domains/"+id+"/guest-command/", map[string]any{"qemu_cmd": "guest-get-fsinfo"}, 200)
		return v["guest-get-fsinfo"]
	}
	normal := len(fsinfo(vm).([]any))
	hostile := func(body map[string]any) {
		t.Helper()
		body["command"] = "guest-get-fsinfo"
		control(t, cl, "/_sim/domains/"+vm+"/guest_hostile", body, nil)
	}

	hostile(map[string]any{"kind": "many", "n": 3000})
	fss := fsinfo(vm).([]any)
	seen := map[string]bool{}
	for _, f := range fss {
		seen[f.(map[string]any)["mountpoint"].(string)] = true
	}
	if len(fss) != 3000 || len(seen) != 3000 {
		t.Errorf("%d filesystems, %d distinct mount points, want 3000", len(fss), len(seen))
	}
	if n := len(fsinfo(other).([]any)); n != normal {
		t.Errorf("another VM answers %d filesystems, want %d", n, normal)
	}

	hostile(map[string]any{"kind": "long_strings", "size": 70000})
	for _, f := range fsinfo(vm).([]any) {
		if mp := f.(map[string]any)["mountpoint"].(string); len(mp) != 70000 {
			t.Errorf("mount point of %d characters, want 70000", len(mp))
		}
	}

	hostile(map[string]any{"kind": "wrong_types"})
	fss = fsinfo(vm).([]any)
	if _, isObj := fss[0].(map[string]any)["total-bytes"].(map[string]any); !isObj {
		t.Errorf("first filesystem total-bytes %v, want an object", fss[0].(map[string]any)["total-bytes"])
	}
	if _, isNum := fss[2].(map[string]any)["total-bytes"].(float64); !isNum {
		t.Errorf("third filesystem total-bytes %v, want a number still", fss[2].(map[string]any)["total-bytes"])
	}

	hostile(map[string]any{"kind": "raw", "raw": map[string]any{"not": "a list"}})
	if got, ok := fsinfo(vm).(map[string]any); !ok || got["not"] != "a list" {
		t.Errorf("raw answer %v", got)
	}
	v := cl.json("POST", "/api/domains/"+vm+"/guest-command/", map[string]any{"qemu_cmd": "guest-ping"}, 200)
	if _, ok := v["guest-ping"].(map[string]any); !ok {
		t.Errorf("another command of the hostile VM: %v", v)
	}

	hostile(map[string]any{"kind": ""})
	if n := len(fsinfo(vm).([]any)); n != normal {
		t.Errorf("after kind \"\": %d filesystems, want %d", n, normal)
	}
	if st, b := cl.do("POST", "/_sim/domains/"+vm+"/guest_hostile", map[string]any{"command": "guest-get-fsinfo", "kind": "evil"}); st != 400 {
		t.Errorf("unknown kind answered %d %s", st, b)
	}
	if err := s.SetGuestHostile(vm, GuestHostile{Command: "guest-get-osinfo", Kind: HostileLongStrings, Size: 10}); err != nil {
		t.Fatal(err)
	}
	v = cl.json("POST", "/api/domains/"+vm+"/guest-command/", map[string]any{"qemu_cmd": "guest-get-osinfo"}, 200)
	if pn := v["guest-get-osinfo"].(map[string]any)["pretty-name"].(string); len(pn) < 10 {
		t.Errorf("osinfo pretty-name %q", pn)
	}
}
