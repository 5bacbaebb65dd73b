package veiltest

// Conformance of clone and task responses through raw HTTP: clone takes the
// ids the client chose (domains_ids) and count, names the VMs from verbose_name (numbered when
// count > 1), and GET /api/tasks/<id>/response/ returns the created VM or VMs.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func TestCloneHonoursDomainsIDsAndCount(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, Templates: 2, TaskDuration: 30 * time.Millisecond})
	tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
	tplName := c.json("GET", "/api/domains/"+tpl+"/", nil, 200)["verbose_name"].(string)

	t.Run("three clones with the client's ids", func(t *testing.T) { cloneThreeWithIDs(t, s, c, tpl, tplName) })

	t.Run("one clone with its id: the response is the VM", func(t *testing.T) {
		id := "0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b10"
		env := c.json("POST", "/api/domains/"+tpl+"/clone/?async=1", map[string]any{"verbose_name": "solo", "domains_ids": []string{id}}, 202)
		if e := env["_entity"].(map[string]any); e["id"] != id || e["status"] != "CREATING" {
			t.Fatalf("entity %v", e)
		}
		taskID := env["_task"].(map[string]any)["id"].(string)
		if st, b := c.do("GET", "/api/tasks/"+taskID+"/response/", nil); st != 400 {
			t.Fatalf("response of a running task: %d %s", st, b)
		}
		waitTask(t, c, taskID)
		v := c.json("GET", "/api/tasks/"+taskID+"/response/", nil, 200)
		if v["id"] != id || v["verbose_name"] != "solo" || v["status"] != "ACTIVE" {
			t.Fatalf("response %v", v)
		}
	})

	t.Run("count without ids draws ids; synchronous answer is the list", func(t *testing.T) {
		var vms []map[string]any
		st, b := c.do("POST", "/api/domains/"+tpl+"/clone/", map[string]any{"verbose_name": "pool", "count": 2})
		if st != 200 || json.Unmarshal(b, &vms) != nil || len(vms) != 2 || vms[0]["verbose_name"] != "pool-1" || vms[1]["verbose_name"] != "pool-2" {
			t.Fatalf("%d %s", st, b)
		}
	})

	for _, tc := range []struct {
		name string
		body map[string]any
		key  string
	}{
		{"ids and count disagree", map[string]any{"verbose_name": "x", "count": 2, "domains_ids": []string{"0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b20"}}, "domains_ids"},
		{"an id already used", map[string]any{"verbose_name": "x", "domains_ids": []string{tpl}}, "domains_ids"},
		{"an id twice", map[string]any{"verbose_name": "x", "domains_ids": []string{"0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b21", "0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b21"}}, "domains_ids"},
		{"not a uuid", map[string]any{"verbose_name": "x", "domains_ids": []string{"vm-1"}}, "domains_ids"},
		{"count zero", map[string]any{"verbose_name": "x", "count": 0}, "count"},
		{"a numbered name taken", map[string]any{"verbose_name": "desk", "count": 2}, "verbose_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do("POST", "/api/domains/"+tpl+"/clone/?async=1", tc.body)
			if st != 400 || errorOf(t, b)["msg_key"] != tc.key {
				t.Fatalf("%d %s, want 400 on %s", st, b, tc.key)
			}
		})
	}
	if st, _ := c.do("GET", "/api/tasks/00000000-0000-4000-8000-000000000000/response/", nil); st != 404 {
		t.Fatalf("response of an unknown task: %d", st)
	}
}

// cloneThreeWithIDs: three clones of tpl with the ids the client chose, as a multitask.
func cloneThreeWithIDs(t *testing.T, s *Server, c *client, tpl, tplName string) {
	want := []string{
		"0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b01",
		"0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b02",
		"0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b03",
	}
	env := c.json("POST", "/api/domains/"+tpl+"/clone/?async=1",
		map[string]any{"verbose_name": "desk", "domains_ids": want, "count": 3}, 202)
	tk := env["_task"].(map[string]any)
	id := tk["id"].(string)
	if tk["is_multitask"] != true {
		t.Fatalf("clone of 3 is not a multitask: %v", tk)
	}
	children := all(t, c, "/api/tasks/?parent="+id+"&ordering=created")
	if len(children) != 3 {
		t.Fatalf("%d child tasks, want 3", len(children))
	}
	for i, ch := range children {
		name := fmt.Sprintf("desk-%d", i+1)
		wantName := "Creating a virtual machine " + name + " as a thin clone of the template " + tplName + " snapshot."
		if ch["name"] != wantName || ch["parent"] != id {
			t.Fatalf("child %d: %v, want %q with parent %s", i, ch, wantName, id)
		}
		if _, ok := ch["entities"].(map[string]any)[want[i]]; !ok {
			t.Fatalf("child %d entities %v lack %s", i, ch["entities"], want[i])
		}
	}
	if done := waitTask(t, c, id); done["status"] != "SUCCESS" {
		t.Fatalf("multitask %v", done)
	}
	resp := c.do2(t, "/api/tasks/"+id+"/response/")
	var vms []map[string]any
	if err := json.Unmarshal(resp, &vms); err != nil || len(vms) != 3 {
		t.Fatalf("response of the multitask: %s", resp)
	}
	for i, vm := range vms {
		if vm["id"] != want[i] || vm["verbose_name"] != fmt.Sprintf("desk-%d", i+1) || vm["status"] != "ACTIVE" || vm["thin"] != true {
			t.Fatalf("created VM %d: %v", i, vm)
		}
		if got := c.json("GET", "/api/domains/"+want[i]+"/", nil, 200); got["verbose_name"] != vm["verbose_name"] {
			t.Fatalf("VM %s: %v", want[i], got)
		}
	}
	for _, ch := range children {
		v := c.json("GET", "/api/tasks/"+ch["id"].(string)+"/response/", nil, 200)
		if _, ok := ch["entities"].(map[string]any)[v["id"].(string)]; !ok {
			t.Fatalf("child response %v is not its VM", v)
		}
	}
}

// do2 is a GET that must answer 200; it returns the raw body (an array for a multitask).
func (c *client) do2(t *testing.T, path string) []byte {
	t.Helper()
	st, b := c.do("GET", path, nil)
	if st != 200 {
		t.Fatalf("GET %s: %d %s", path, st, b)
	}
	return b
}
