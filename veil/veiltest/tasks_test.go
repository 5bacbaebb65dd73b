package veiltest

// Conformance of the task journal through raw HTTP: tasks are named by
// sentences naming their entities, with verbose_name and their journal events inline in the
// detail; every operation writes "created" then "finished" or "failed" events linked to its
// task; the background activity of EventRate is made of such operations, so inventory, tasks
// and events agree.

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// all reads every page of a collection by following next.
func all(t *testing.T, c *client, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for path != "" {
		v := c.json("GET", path, nil, 200)
		out = append(out, results(t, v)...)
		next, _ := v["next"].(string)
		path = strings.TrimPrefix(next, c.base)
	}
	return out
}

// entitySet turns an event's entities list into {uuid: class}.
func entitySet(t *testing.T, ev map[string]any) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, x := range ev["entities"].([]any) {
		e := x.(map[string]any)
		m[e["entity_uuid"].(string)] = e["entity_class"].(string)
	}
	return m
}

func sameEntities(t *testing.T, task map[string]any, ev map[string]any) bool {
	t.Helper()
	want := task["entities"].(map[string]any)
	got := entitySet(t, ev)
	if len(want) != len(got) {
		return false
	}
	for id, class := range want {
		if got[id] != class {
			return false
		}
	}
	return true
}

func TestTaskNamesAreSentencesNamingTheEntity(t *testing.T) {
	s, c := newSim(t, Options{VMs: 20, Templates: 2, TaskDuration: 20 * time.Millisecond,
		RunningFraction: 1, AgentFraction: 1, LinuxFraction: 1})
	vm := pickVM(t, s, func(d DomainInfo) bool { return !d.Template && !d.Thin })
	other := pickVM(t, s, func(d DomainInfo) bool { return !d.Template && !d.Thin && d.ID != vm })
	tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
	node := s.NodeIDs()[0]
	name := func(id string) string { d, _ := s.Domain(id); return d.Name }
	nodeName := c.json("GET", "/api/nodes/"+node+"/", nil, 200)["verbose_name"].(string)
	vmName, otherName, tplName := name(vm), name(other), name(tpl)

	for _, tc := range []struct {
		method, path string
		body         map[string]any
		want         string
	}{
		{"POST", "/api/domains/" + vm + "/shutdown/", nil, "Shutting down the virtual machine " + vmName + "."},
		{"POST", "/api/domains/" + vm + "/start/", nil, "Starting the virtual machine " + vmName + "."},
		{"POST", "/api/domains/" + vm + "/shutdown/", map[string]any{"force": true}, "Forced shutdown of the virtual machine " + vmName + "."},
		{"POST", "/api/domains/backup/", map[string]any{"domain": vm}, "Backup of the virtual machine " + vmName + "."},
		{"POST", "/api/domains/" + vm + "/ssh-inject/", map[string]any{"ssh_key": "ssh-ed25519 AAAA k"}, "Adding SSH keys to the virtual machine " + vmName + "."},
		{"PUT", "/api/domains/" + vm + "/template/", map[string]any{"template": true}, "Converting the virtual machine " + vmName + " to a template."},
		{"PUT", "/api/domains/" + vm + "/template/", map[string]any{"template": false}, "Converting the template " + vmName + " to a virtual machine."},
		{"POST", "/api/domains/" + tpl + "/clone/", map[string]any{"verbose_name": "thin-1"}, "Creating a virtual machine thin-1 as a thin clone of the template " + tplName + " snapshot."},
		{"POST", "/api/domains/" + vm + "/clone/", map[string]any{"verbose_name": "full-1"}, "Creating a virtual machine full-1 by cloning the virtual machine " + vmName + "."},
		{"PUT", "/api/nodes/" + node + "/ballooning/", map[string]any{"ballooning": false}, "Changing memory ballooning of the node " + nodeName + "."},
		{"POST", "/api/domains/" + other + "/remove/", nil, "Deleting the virtual machine " + otherName + "."},
	} {
		t.Run(tc.want, func(t *testing.T) {
			env := c.json(tc.method, tc.path+"?async=1", tc.body, 202)
			tk := env["_task"].(map[string]any)
			if tk["name"] != tc.want || tk["verbose_name"] != "Task" {
				t.Fatalf("task name %q verbose_name %q, want %q and Task", tk["name"], tk["verbose_name"], tc.want)
			}
			id := tk["id"].(string)
			done := waitTask(t, c, id)
			if done["status"] != "SUCCESS" {
				t.Fatalf("task %v", done)
			}
			evs, ok := done["events"].([]any)
			if !ok || len(evs) != 2 {
				t.Fatalf("task detail events %v, want created and finished", done["events"])
			}
			for i, want := range []string{"Task created:  " + tc.want, "Task finished successfully:  " + tc.want} {
				ev := evs[i].(map[string]any)
				if ev["message"] != want || ev["task"] != id || ev["type"] != "info" || !sameEntities(t, done, ev) {
					t.Fatalf("event %d: %v, want %q linked to the task with its entities %v", i, ev, want, done["entities"])
				}
				// The same event is in the journal.
				if j := c.json("GET", "/api/events/"+ev["id"].(string)+"/", nil, 200); j["message"] != want {
					t.Fatalf("journal has %v", j)
				}
			}
			if _, ok := done["nodes_user_responses"].([]any); !ok {
				t.Fatalf("detail without nodes_user_responses: %v", done)
			}
			// The list form carries no events.
			for _, x := range results(t, c.json("GET", "/api/tasks/?limit=5", nil, 200)) {
				if x["id"] == id {
					if _, has := x["events"]; has || x["name"] != tc.want {
						t.Fatalf("list item %v", x)
					}
				}
			}
		})
	}
}

func TestFailedTaskWritesAnErrorEvent(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, Templates: -1, TaskDuration: 10 * time.Millisecond, TaskFailureRate: 1})
	vm := s.DomainIDs()[0]
	env := c.json("POST", "/api/domains/"+vm+"/shutdown/?async=1", nil, 202)
	done := waitTask(t, c, env["_task"].(map[string]any)["id"].(string))
	if done["status"] != "FAILED" || done["error_message"] == "" {
		t.Fatalf("task %v", done)
	}
	evs := done["events"].([]any)
	last := evs[len(evs)-1].(map[string]any)
	if len(evs) != 2 || last["type"] != "error" || last["message"] != "Task failed:  "+done["name"].(string) ||
		last["detail_message"] != done["error_message"] || !sameEntities(t, done, last) {
		t.Fatalf("events of a failed task: %v", evs)
	}
}

// TestBackgroundActivityTellsOneStory runs the background activity for a simulated minute
// and checks that the journal, the tasks and the inventory agree.
func TestBackgroundActivityTellsOneStory(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, c := newSim(t, Options{Seed: 4, VMs: 30, Templates: 2, Nodes: 4, EventRate: 10, InitialTasks: -1, Now: clock})
	pinned := s.DomainIDs()[5]
	if err := s.PowerOff(pinned); err != nil { // a scenario's VM: the background leaves it alone
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	s.SetEventRate(0)
	mu.Lock()
	now = now.Add(time.Hour) // every task started ends
	mu.Unlock()

	tasks := all(t, c, "/api/tasks/?ordering=created")
	events := all(t, c, "/api/events/?ordering=created")
	if len(tasks) < 100 || len(events) < 500 {
		t.Fatalf("%d tasks and %d events after a minute at 10 events/s", len(tasks), len(events))
	}
	byID := map[string]map[string]any{}
	kinds := map[string]int{}
	for _, tk := range tasks {
		byID[tk["id"].(string)] = tk
		name := tk["name"].(string)
		if tk["status"] == "IN_PROGRESS" || !strings.HasSuffix(name, ".") || tk["verbose_name"] != "Task" {
			t.Fatalf("task %v", tk)
		}
		if _, ok := tk["entities"].(map[string]any)[pinned]; ok {
			t.Fatalf("the background worked on a pinned VM: %v", tk)
		}
		kinds[strings.Fields(name)[0]]++
	}
	for _, k := range []string{"Starting", "Shutting", "Backup", "Migrating", "Creating"} {
		if kinds[k] == 0 {
			t.Errorf("no %q task among %v", k, kinds)
		}
	}
	// Every task has exactly its created and final events, linked and with its entities.
	perTask := map[string][]map[string]any{}
	var agent int
	var last string
	for _, ev := range events {
		if cr := ev["created"].(string); cr < last {
			t.Fatalf("journal out of order: %s after %s", cr, last)
		} else {
			last = cr
		}
		id, _ := ev["task"].(string)
		if id == "" {
			if strings.Contains(ev["message"].(string), "Guest agent") {
				agent++
			}
			continue
		}
		tk, ok := byID[id]
		if !ok {
			t.Fatalf("event %v points at an unknown task", ev)
		}
		if !sameEntities(t, tk, ev) || len(entitySet(t, ev)) == 0 {
			t.Fatalf("event entities %v, task entities %v", ev["entities"], tk["entities"])
		}
		perTask[id] = append(perTask[id], ev)
	}
	if agent == 0 {
		t.Error("no guest agent lost or back")
	}
	checkTaskEvents(t, byID, perTask)
	checkInventoryFollowsTasks(t, c, tasks)
}

// checkTaskEvents: each task has exactly its created and final events, at its created and finished
// times.
func checkTaskEvents(t *testing.T, byID map[string]map[string]any, perTask map[string][]map[string]any) {
	t.Helper()
	for id, tk := range byID {
		evs := perTask[id]
		final := "Task finished successfully:  "
		if tk["status"] == "FAILED" {
			final = "Task failed:  "
		}
		if len(evs) != 2 || evs[0]["message"] != "Task created:  "+tk["name"].(string) || evs[1]["message"] != final+tk["name"].(string) {
			t.Fatalf("task %s %q: events %v", id, tk["name"], evs)
		}
		if evs[0]["created"] != tk["created"] || evs[1]["created"] != tk["finished_time"] {
			t.Fatalf("task %s created %v finished %v, events at %v and %v", id, tk["created"], tk["finished_time"], evs[0]["created"], evs[1]["created"])
		}
	}
}

// checkInventoryFollowsTasks: the inventory is where the tasks left it: the power state of each
// VM is that of its last successful power task, and the names in the tasks are the VMs' names.
func checkInventoryFollowsTasks(t *testing.T, c *client, tasks []map[string]any) {
	t.Helper()
	lastPower := map[string]int{}
	var order []map[string]any
	for _, tk := range tasks {
		if tk["status"] == "SUCCESS" {
			order = append(order, tk)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i]["finished_time"].(string) < order[j]["finished_time"].(string) })
	for _, tk := range order {
		for id := range tk["entities"].(map[string]any) {
			switch strings.Fields(tk["name"].(string))[0] {
			case "Starting":
				lastPower[id] = 3
			case "Shutting":
				lastPower[id] = 1
			}
		}
	}
	domains := all(t, c, "/api/domains/")
	for _, d := range domains {
		id := d["id"].(string)
		if want, ok := lastPower[id]; ok && d["user_power_state"] != float64(want) {
			t.Errorf("VM %s power %v, its last power task says %d", d["verbose_name"], d["user_power_state"], want)
		}
		if d["status"] != "ACTIVE" && d["status"] != "FAILED" {
			t.Errorf("VM %s left in %v", d["verbose_name"], d["status"])
		}
	}
	names := map[string]string{}
	for _, d := range domains {
		names[d["id"].(string)] = d["verbose_name"].(string)
	}
	for _, tk := range tasks {
		for id, class := range tk["entities"].(map[string]any) {
			if n, ok := names[id]; ok && class == "domain" && !strings.Contains(tk["name"].(string), n) {
				t.Fatalf("task %q does not name its VM %s", tk["name"], n)
			}
		}
	}
	if len(domains) > 30+bgMaxClones {
		t.Errorf("%d VMs: the background clones without bound", len(domains))
	}
}

func TestTaskDetailListsOnlyEventsTheJournalKeeps(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3, Templates: -1, TaskDuration: 10 * time.Millisecond, EventsRetention: 5})
	env := c.json("POST", "/api/domains/"+s.DomainIDs()[0]+"/shutdown/?async=1", nil, 202)
	id := env["_task"].(map[string]any)["id"].(string)
	if evs := waitTask(t, c, id)["events"].([]any); len(evs) != 2 {
		t.Fatalf("%d events before retention", len(evs))
	}
	s.AddEvents(4, EventSpec{}) // the created event leaves the journal
	evs := c.json("GET", "/api/tasks/"+id+"/", nil, 200)["events"].([]any)
	if len(evs) != 1 || !strings.HasPrefix(evs[0].(map[string]any)["message"].(string), "Task finished successfully:") {
		t.Fatalf("events after retention: %v", evs)
	}
	s.AddEvents(1, EventSpec{})
	if evs := c.json("GET", "/api/tasks/"+id+"/", nil, 200)["events"].([]any); len(evs) != 0 {
		t.Fatalf("events after retention took both: %v", evs)
	}
}
