package veiltest

// Conformance to the vendor clients' dialect through raw HTTP: with the
// default profile, the vendor's Go client decodes domain tags as {colour, verbose_name}
// objects (a string fails it), and the vendor's Python client takes the first key of a task's
// entities as the entity the task creates (VeilTask.first_entity), so entities keep the order
// the task was built in, the created VM first, whatever the uuids' order.

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestDefaultProfileSendsTagsAsVendorObjects(t *testing.T) {
	s, c := newSim(t, Options{VMs: 20, Templates: 2})
	st, b := c.do("GET", "/api/domains/?limit=100", nil)
	if st != 200 {
		t.Fatalf("GET /api/domains/: status %d: %s", st, b)
	}
	// The vendor Go client's declaration: a list of strings fails here.
	var vendor struct {
		Results []struct {
			ID   string `json:"id"`
			Tags []struct {
				Colour      string `json:"colour"`
				VerboseName string `json:"verbose_name"`
			} `json:"tags"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &vendor); err != nil {
		t.Fatalf("the vendor's tag objects do not decode: %v", err)
	}
	var raw struct {
		Results []struct {
			Tags []map[string]any `json:"tags"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if n := len(s.DomainIDs()); len(vendor.Results) != n || len(raw.Results) != n {
		t.Fatalf("%d domains, want %d", len(vendor.Results), n)
	}
	tagged := 0
	for i, d := range raw.Results {
		if d.Tags == nil {
			t.Fatalf("domain %s: tags missing or null, want an array", vendor.Results[i].ID)
		}
		for j, tag := range d.Tags {
			keys := mapKeys(tag)
			if !slices.Equal(keys, []string{"colour", "verbose_name"}) {
				t.Fatalf("domain %s tag %v: keys %v, want colour and verbose_name", vendor.Results[i].ID, tag, keys)
			}
			if v := vendor.Results[i].Tags[j]; v.Colour == "" || v.VerboseName == "" {
				t.Fatalf("domain %s tag %+v: empty field", vendor.Results[i].ID, v)
			}
		}
		if len(d.Tags) > 0 {
			tagged++
		}
	}
	if tagged == 0 {
		t.Fatal("no domain has tags: nothing was checked")
	}

	// The detail carries the same objects.
	id := s.DomainIDs()[0]
	for _, r := range vendor.Results {
		if len(r.Tags) > 0 {
			id = r.ID
			break
		}
	}
	var detail struct {
		Tags []map[string]any `json:"tags"`
	}
	if err := json.Unmarshal(c.do2(t, "/api/domains/"+id+"/"), &detail); err != nil || len(detail.Tags) == 0 {
		t.Fatalf("detail of %s: tags %v (%v)", id, detail.Tags, err)
	}
	if keys := mapKeys(detail.Tags[0]); !slices.Equal(keys, []string{"colour", "verbose_name"}) {
		t.Fatalf("detail tag %v", detail.Tags[0])
	}
}

func TestTaskEntitiesKeepTheTaskOrderCreatedVMFirst(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	s, c := newSim(t, Options{VMs: 10, Templates: 2, TaskDuration: time.Second, Now: clock.Now})
	tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
	// Ids that sort after the template's, the second clone's before the first's: a map
	// encoder's sorted keys would put the template or the wrong clone first.
	one := "ffffffff-ffff-4fff-bfff-ffffffffff10"
	two, three := "ffffffff-ffff-4fff-bfff-ffffffffff30", "ffffffff-ffff-4fff-bfff-ffffffffff20"
	if !(tpl < one && tpl < three && three < two) {
		t.Fatalf("template id %s does not sort before the chosen ids", tpl)
	}

	st, b := c.do("POST", "/api/domains/"+tpl+"/clone/?async=1", map[string]any{"verbose_name": "ordered", "domains_ids": []string{one}})
	if st != 202 {
		t.Fatalf("clone: status %d: %s", st, b)
	}
	single := jsonString(t, b, "_task", "id")
	multiBody := map[string]any{"verbose_name": "ordered-many", "domains_ids": []string{two, three}, "count": 2}
	st, mb := c.do("POST", "/api/domains/"+tpl+"/clone/?async=1", multiBody)
	if st != 202 {
		t.Fatalf("clone of 2: status %d: %s", st, mb)
	}
	multi := jsonString(t, mb, "_task", "id")

	check := func(when, what string, body []byte, want []string, path ...string) {
		t.Helper()
		got := objectKeys(t, jsonPath(t, body, path...))
		if !slices.Equal(got, want) {
			t.Fatalf("%s, %s: entities keys %v, want %v (the created VMs first, then the template)", when, what, got, want)
		}
	}
	check("running", "async envelope", b, []string{one, tpl}, "_task", "entities")
	check("running", "multitask envelope", mb, []string{two, three, tpl}, "_task", "entities")
	for _, when := range []string{"running", "finished"} {
		if when == "finished" {
			clock.add(2 * time.Second)
		}
		check(when, "task detail", c.do2(t, "/api/tasks/"+single+"/"), []string{one, tpl}, "entities")
		check(when, "multitask detail", c.do2(t, "/api/tasks/"+multi+"/"), []string{two, three, tpl}, "entities")
		list := c.do2(t, "/api/tasks/?parent="+multi+"&limit=100")
		var children struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(list, &children); err != nil || len(children.Results) != 2 {
			t.Fatalf("%s: children of the multitask: %s", when, list)
		}
		for _, ch := range children.Results {
			first := objectKeys(t, jsonPath(t, ch, "entities"))
			if len(first) != 2 || (first[0] != two && first[0] != three) || first[1] != tpl {
				t.Fatalf("%s: child task entities keys %v, want its VM then %s", when, first, tpl)
			}
		}
	}
	for _, id := range []string{single, multi} {
		if got := jsonString(t, c.do2(t, "/api/tasks/"+id+"/"), "status"); got != "SUCCESS" {
			t.Fatalf("task %s status %s after the clock passed its deadline", id, got)
		}
	}
}

// manualClock is Options.Now under the test's control: tasks finish when the test moves it.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// jsonPath is the raw value at path in a JSON object.
func jsonPath(t *testing.T, b []byte, path ...string) json.RawMessage {
	t.Helper()
	cur := json.RawMessage(b)
	for _, k := range path {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil {
			t.Fatalf("%v in %s: %v", path, b, err)
		}
		v, ok := m[k]
		if !ok {
			t.Fatalf("no %v in %s", path, b)
		}
		cur = v
	}
	return cur
}

// jsonString is the string at path in a JSON object.
func jsonString(t *testing.T, b []byte, path ...string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(jsonPath(t, b, path...), &s); err != nil {
		t.Fatalf("%v in %s is not a string", path, b)
	}
	return s
}

// objectKeys reads a JSON object's keys in the order they were written.
func objectKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return keys
}

func mapKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
