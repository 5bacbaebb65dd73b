package veiltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func newClient(t *testing.T, s *Server) *client {
	return &client{t: t, base: s.URL, token: s.Token}
}

func (c *client) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "jwt "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// json does a request, checks the status and decodes the body.
func (c *client) json(method, path string, body any, want int) map[string]any {
	c.t.Helper()
	st, b := c.do(method, path, body)
	if st != want {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, st, want, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		c.t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, path, err, b)
	}
	return v
}

// errorOf checks a §7 error body and returns its first element.
func errorOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v struct {
		Errors []map[string]any `json:"errors"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Errors) == 0 {
		t.Fatalf("not a §7 error body: %s", b)
	}
	e := v.Errors[0]
	key, _ := e["msg_key"].(string)
	if _, ok := e["code"].(string); !ok || key == "" {
		t.Fatalf("error without code or msg_key: %s", b)
	}
	if msg, _ := e[key].(string); msg == "" {
		t.Fatalf("error has no message under msg_key %q: %s", key, b)
	}
	return e
}

func results(t *testing.T, v map[string]any) []map[string]any {
	t.Helper()
	rs, ok := v["results"].([]any)
	if !ok {
		t.Fatalf("no results array in %v", v)
	}
	out := make([]map[string]any, len(rs))
	for i, r := range rs {
		out[i] = r.(map[string]any)
	}
	return out
}

func newSim(t *testing.T, o Options) (*Server, *client) {
	t.Helper()
	s := New(o)
	t.Cleanup(s.Close)
	return s, newClient(t, s)
}

func TestPagingFollowsDRFEnvelopeAndSpecLimits(t *testing.T) {
	for _, n := range []int{0, 1, 100, 101} {
		t.Run(fmt.Sprintf("%d_events", n), func(t *testing.T) {
			_, c := newSim(t, Options{InitialEvents: n, VMs: -1, InitialTasks: -1})
			v := c.json("GET", "/api/events/", nil, 200)
			if got := v["count"].(float64); int(got) != n {
				t.Fatalf("count %v, want %d", got, n)
			}
			rs := results(t, v)
			if len(rs) != min(n, 100) {
				t.Fatalf("%d results, want %d", len(rs), min(n, 100))
			}
			if (v["next"] != nil) != (n > 100) {
				t.Fatalf("next = %v with %d items", v["next"], n)
			}
			if v["previous"] != nil {
				t.Fatalf("previous on the first page: %v", v["previous"])
			}
			if n > 100 {
				next := v["next"].(string)
				if !strings.HasPrefix(next, c.base+"/api/events/") || !strings.Contains(next, "offset=100") {
					t.Fatalf("next is not an absolute URL to offset 100: %s", next)
				}
				v2 := c.json("GET", strings.TrimPrefix(next, c.base), nil, 200)
				if len(results(t, v2)) != 1 || v2["next"] != nil || v2["previous"] == nil {
					t.Fatalf("second page wrong: %v", v2)
				}
			}
		})
	}

	_, c := newSim(t, Options{VMs: 150})
	for _, tc := range []struct {
		name  string
		query string
		want  int // results, or -1 for a 400
		field string
	}{
		{"limit above 100 is clamped", "limit=500", 100, ""},
		{"default limit is 100", "", 100, ""},
		{"limit and offset page", "limit=20&offset=140", 10, ""},
		{"offset beyond count is empty", "offset=1000", 0, ""},
		{"limit zero is an empty page", "limit=0", 0, ""},
		{"negative limit is a field error", "limit=-1", -1, "limit"},
		{"non-integer limit is a field error", "limit=ten", -1, "limit"},
		{"negative offset is a field error", "offset=-5", -1, "offset"},
		{"fractional offset is a field error", "offset=1.5", -1, "offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do("GET", "/api/domains/?"+tc.query, nil)
			if tc.want < 0 {
				if st != 400 {
					t.Fatalf("status %d, want 400: %s", st, b)
				}
				e := errorOf(t, b)
				if e["code"] != "invalid" || e["msg_key"] != tc.field {
					t.Fatalf("error %v, want code invalid for %s", e, tc.field)
				}
				return
			}
			var v map[string]any
			if st != 200 || json.Unmarshal(b, &v) != nil {
				t.Fatalf("status %d: %s", st, b)
			}
			if v["count"].(float64) != 150 || len(results(t, v)) != tc.want {
				t.Fatalf("count %v, %d results, want 150 and %d", v["count"], len(results(t, v)), tc.want)
			}
		})
	}
}

func TestAuthNeedsJWTTokenAndReadOnlyCannotWrite(t *testing.T) {
	s, _ := newSim(t, Options{ReadOnlyToken: "ro"})
	vm := s.DomainIDs()[0]
	for _, tc := range []struct {
		name, header, method, path string
		want                       int
	}{
		{"no header", "", "GET", "/api/nodes/", 401},
		{"wrong token", "jwt nope", "GET", "/api/nodes/", 401},
		{"bearer scheme", "Bearer sim-token", "GET", "/api/nodes/", 401},
		{"bare token", "sim-token", "GET", "/api/nodes/", 401},
		{"good token", "jwt sim-token", "GET", "/api/nodes/", 200},
		{"read-only token reads", "jwt ro", "GET", "/api/domains/", 200},
		{"read-only token cannot start", "jwt ro", "POST", "/api/domains/" + vm + "/start/?async=1", 403},
		{"read-only token cannot put", "jwt ro", "PUT", "/api/domains/" + vm + "/template/", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader("{}"))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			if tc.want >= 400 {
				if e := errorOf(t, b); e["code"] != fmt.Sprint(tc.want) {
					t.Fatalf("code %v, want %d", e["code"], tc.want)
				}
			}
		})
	}
}

func TestNotFoundAndMethodNotAllowedHaveErrorBodies(t *testing.T) {
	s, c := newSim(t, Options{})
	node := s.NodeIDs()[0]
	for _, tc := range []struct {
		name, method, path string
		want               int
		code               string
	}{
		{"unknown path", "GET", "/api/nothing/", 404, "50004"},
		{"unknown domain", "GET", "/api/domains/00000000-0000-4000-8000-000000000000/", 404, "50004"},
		{"unknown task", "GET", "/api/tasks/00000000-0000-4000-8000-000000000000/", 404, "50004"},
		{"unknown event", "GET", "/api/events/x/", 404, "50004"},
		{"delete a collection", "DELETE", "/api/domains/", 405, "405"},
		{"get an operation", "GET", "/api/domains/backup/", 405, "405"},
		{"node without trailing slash", "GET", "/api/nodes/" + node, 200, ""},
		{"collection without trailing slash", "GET", "/api/nodes", 200, ""},
		{"docs", "GET", "/api/docs/", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do(tc.method, tc.path, nil)
			if st != tc.want {
				t.Fatalf("status %d, want %d: %s", st, tc.want, b)
			}
			if tc.code != "" {
				if e := errorOf(t, b); e["code"] != tc.code {
					t.Fatalf("code %v, want %s", e["code"], tc.code)
				}
			}
		})
	}
}

func TestWireFieldsMatchPlatformFacts(t *testing.T) {
	s, c := newSim(t, Options{Nodes: 10, StringPercentNodes: 0.5, VMs: 40, Templates: 2, InitialEvents: 5})
	var sawString, sawNumber bool
	for _, n := range results(t, c.json("GET", "/api/nodes/", nil, 200)) {
		if _, ok := n["cluster"].(map[string]any); !ok {
			t.Fatalf("node list cluster is not an object: %v", n["cluster"])
		}
		switch n["cpu_used_percent_user"].(type) {
		case string:
			sawString = true
		case float64:
			sawNumber = true
		}
	}
	if !sawString || !sawNumber {
		t.Fatalf("want both string and number usage percents (string %v, number %v)", sawString, sawNumber)
	}
	nd := c.json("GET", "/api/nodes/"+s.NodeIDs()[0]+"/", nil, 200)
	if _, ok := nd["cluster"].(string); !ok {
		t.Fatalf("node detail cluster is not a uuid string: %v", nd["cluster"])
	}
	for _, f := range []string{"version", "ballooning", "uptime", "cpu_topology", "created", "modified"} {
		if _, ok := nd[f]; !ok {
			t.Fatalf("node detail lacks %s", f)
		}
	}
	var sawThin, sawEmptyGU bool
	for _, d := range results(t, c.json("GET", "/api/domains/", nil, 200)) {
		if ps := d["user_power_state"].(float64); ps < 0 || ps > 3 {
			t.Fatalf("user_power_state %v", ps)
		}
		if d["thin"] == true {
			sawThin = true
			if p, ok := d["parent"].(map[string]any); !ok || p["id"] == "" {
				t.Fatalf("thin clone without parent object: %v", d)
			}
		}
		gu := d["guest_utils"].(map[string]any)
		if len(gu) == 0 {
			sawEmptyGU = true
		} else if _, ok := gu["qemu_state"].(bool); !ok {
			t.Fatalf("guest_utils without qemu_state: %v", gu)
		}
	}
	if !sawThin {
		t.Fatal("no thin clone of a template in the inventory")
	}
	_ = sawEmptyGU // depends on the seed; guest_utils {} is covered in TestDriversChangeState
	ev := results(t, c.json("GET", "/api/events/?limit=1", nil, 200))[0]
	if created := ev["created"].(string); len(created) != len("2021-08-20T10:08:09.761081Z") || !strings.HasSuffix(created, "Z") {
		t.Fatalf("created %q is not microsecond UTC", created)
	}
	for _, f := range []string{"id", "message", "detail_message", "user", "type", "task", "readed", "entities"} {
		if _, ok := ev[f]; !ok {
			t.Fatalf("event lacks %s: %v", f, ev)
		}
	}
}

// runVM returns a running Linux VM with an active agent, no template.
func pickVM(t *testing.T, s *Server, pred func(DomainInfo) bool) string {
	t.Helper()
	for _, id := range s.DomainIDs() {
		if d, _ := s.Domain(id); pred(d) {
			return id
		}
	}
	t.Fatal("no VM matches")
	return ""
}

func waitTask(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v := c.json("GET", "/api/tasks/"+id+"/", nil, 200)
		if v["status"] != "IN_PROGRESS" {
			return v
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("task %s did not finish", id)
	return nil
}

func TestOperationsRunTasksAndChangeState(t *testing.T) {
	s, c := newSim(t, Options{VMs: 20, Templates: 2, TaskDuration: 80 * time.Millisecond,
		RunningFraction: 1, AgentFraction: 1, LinuxFraction: 1})
	plain := func(d DomainInfo) bool { return !d.Template && !d.Thin }
	vm := pickVM(t, s, plain)
	node2 := s.NodeIDs()[1]
	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
		entity             bool
		check              func(t *testing.T)
	}{
		{"shutdown powers off", "POST", "/api/domains/" + vm + "/shutdown/", map[string]any{"force": true}, true, func(t *testing.T) {
			if d, _ := s.Domain(vm); d.PowerState != 1 || d.AgentActive {
				t.Fatalf("after shutdown: %+v", d)
			}
		}},
		{"start powers on", "POST", "/api/domains/" + vm + "/start/", nil, true, func(t *testing.T) {
			if d, _ := s.Domain(vm); d.PowerState != 3 || !d.AgentActive {
				t.Fatalf("after start: %+v", d)
			}
		}},
		{"ssh-inject adds a key", "POST", "/api/domains/" + vm + "/ssh-inject/", map[string]any{"ssh_key": "ssh-ed25519 AAAA sim", "create_user": false}, true, func(t *testing.T) {
			v := c.json("POST", "/api/domains/"+vm+"/guest-command/", map[string]any{"qemu_cmd": "guest-ssh-get-authorized-keys", "fargs": map[string]any{"username": "root"}}, 200)
			if keys := v["guest-ssh-get-authorized-keys"].(map[string]any)["keys"].([]any); len(keys) != 1 {
				t.Fatalf("keys %v", keys)
			}
		}},
		{"ballooning changes the node", "PUT", "/api/nodes/" + node2 + "/ballooning/", map[string]any{"ballooning": false}, true, func(t *testing.T) {
			if v := c.json("GET", "/api/nodes/"+node2+"/", nil, 200); v["ballooning"] != false {
				t.Fatalf("ballooning %v", v["ballooning"])
			}
		}},
		{"backup runs", "POST", "/api/domains/backup/", map[string]any{"domain": vm, "compress": true, "limit_days": 7}, false, func(t *testing.T) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := c.json(tc.method, tc.path+"?async=1", tc.body, 202)
			tk := env["_task"].(map[string]any)
			if tk["status"] != "IN_PROGRESS" || tk["executed"] != float64(0) || tk["finished_time"] != nil {
				t.Fatalf("running task: %v", tk)
			}
			if _, ok := env["_entity"]; ok != tc.entity {
				t.Fatalf("_entity present %v, want %v: %v", ok, tc.entity, env)
			}
			done := waitTask(t, c, tk["id"].(string))
			if done["status"] != "SUCCESS" || done["progress"] != float64(100) || done["finished_time"] == nil {
				t.Fatalf("finished task: %v", done)
			}
			if _, ok := done["executed"].(string); !ok {
				t.Fatalf("executed of a finished task is not a string: %v", done["executed"])
			}
			tc.check(t)
			// The journal has the start and finish events, both pointing at the task.
			var n int
			for _, e := range results(t, c.json("GET", "/api/events/?limit=20", nil, 200)) {
				if e["task"] == tk["id"] {
					n++
				}
			}
			if n != 2 {
				t.Fatalf("%d events for task %v, want 2", n, tk["id"])
			}
		})
	}

	t.Run("synchronous request answers with the VM once the task is done", func(t *testing.T) {
		got := c.json("POST", "/api/domains/"+vm+"/shutdown/", nil, 200)
		if got["id"] != vm || got["user_power_state"] != float64(1) {
			t.Fatalf("sync answer %v", got)
		}
		if d, _ := s.Domain(vm); d.PowerState != 1 {
			t.Fatalf("power %d after synchronous shutdown", d.PowerState)
		}
	})

	t.Run("clone of a template is a thin clone", func(t *testing.T) {
		tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
		env := c.json("POST", "/api/domains/"+tpl+"/clone/?async=1", map[string]any{"verbose_name": "clone-1", "node": node2}, 202)
		ent := env["_entity"].(map[string]any)
		if ent["status"] != "CREATING" || ent["thin"] != true || ent["parent"].(map[string]any)["id"] != tpl {
			t.Fatalf("clone entity %v", ent)
		}
		waitTask(t, c, env["_task"].(map[string]any)["id"].(string))
		got := c.json("GET", "/api/domains/"+ent["id"].(string)+"/", nil, 200)
		if got["status"] != "ACTIVE" || got["node"].(map[string]any)["id"] != node2 {
			t.Fatalf("clone after task: %v", got)
		}
		if v := c.json("GET", "/api/domains/?name=clone-1", nil, 200); v["count"] != float64(1) {
			t.Fatalf("name filter found %v", v["count"])
		}
	})

	t.Run("template flag and remove", func(t *testing.T) {
		vm2 := pickVM(t, s, func(d DomainInfo) bool { return plain(d) && d.ID != vm })
		c.json("POST", "/api/domains/"+vm2+"/shutdown/", nil, 200)
		c.json("PUT", "/api/domains/"+vm2+"/template/", map[string]any{"template": "true"}, 200)
		if d, _ := s.Domain(vm2); !d.Template {
			t.Fatal("template flag not set")
		}
		c.json("POST", "/api/domains/"+vm2+"/remove/", map[string]any{"full": true}, 200)
		if _, ok := s.Domain(vm2); ok {
			t.Fatal("VM still exists after remove")
		}
		if st, _ := c.do("GET", "/api/domains/"+vm2+"/", nil); st != 404 {
			t.Fatalf("removed VM answers %d", st)
		}
	})
}

func TestIdempotencyKeyDoesNotRunTwice(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, Templates: -1, TaskDuration: 30 * time.Millisecond, RunningFraction: -1})
	vm := s.DomainIDs()[0]
	key := "3f0c5a52-4b7e-4d8e-9a0f-1c2d3e4f5a6b"
	env := c.json("POST", "/api/domains/"+vm+"/start/?async=1", map[string]any{"idempotency_key": key}, 202)
	if env["_task"].(map[string]any)["id"] != key {
		t.Fatalf("task id %v, want the idempotency key", env["_task"])
	}
	waitTask(t, c, key)
	before := c.json("GET", "/api/tasks/?limit=1", nil, 200)["count"]
	s.PowerOff(vm)
	again := c.json("POST", "/api/domains/"+vm+"/start/?async=1", map[string]any{"idempotency_key": key}, 200)
	if again["id"] != vm {
		t.Fatalf("repeated start should answer with the VM object, got %v", again)
	}
	if d, _ := s.Domain(vm); d.PowerState != 1 {
		t.Fatal("a repeated key started the VM again")
	}
	if after := c.json("GET", "/api/tasks/?limit=1", nil, 200)["count"]; after != before {
		t.Fatalf("task count %v -> %v: repeated key created a task", before, after)
	}
	// Other operations answer with the existing task's envelope.
	key2 := "3f0c5a52-4b7e-4d8e-9a0f-1c2d3e4f5a6c"
	c.json("POST", "/api/domains/"+vm+"/shutdown/", map[string]any{"idempotency_key": key2}, 200)
	rep := c.json("POST", "/api/domains/"+vm+"/shutdown/?async=1", map[string]any{"idempotency_key": key2}, 200)
	if tk := rep["_task"].(map[string]any); tk["id"] != key2 || tk["status"] != "SUCCESS" {
		t.Fatalf("repeated shutdown envelope %v", rep)
	}
	if st, b := c.do("POST", "/api/domains/"+vm+"/start/", map[string]any{"idempotency_key": "not-a-uuid"}); st != 400 || errorOf(t, b)["msg_key"] != "idempotency_key" {
		t.Fatalf("bad key: %d %s", st, b)
	}
}

func TestRuleViolationsAnswer400(t *testing.T) {
	s, c := newSim(t, Options{VMs: 40, Templates: 4, LinuxFraction: 0.5, RunningFraction: 1, AgentFraction: 1, TaskDuration: 10 * time.Millisecond})
	tplWithClones := pickVM(t, s, func(d DomainInfo) bool {
		if !d.Template {
			return false
		}
		for _, id := range s.DomainIDs() {
			if x, _ := s.Domain(id); x.ParentID == d.ID {
				return true
			}
		}
		return false
	})
	win := pickVM(t, s, func(d DomainInfo) bool { return !d.Linux && !d.Template })
	linux := pickVM(t, s, func(d DomainInfo) bool { return d.Linux && !d.Template && !d.Thin })
	if err := s.SetGuestAgent(linux, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
		key                string // msg_key expected
		contains           string
	}{
		{"remove a template with thin clones", "POST", "/api/domains/" + tplWithClones + "/remove/", nil, "detail", "thin clones"},
		{"unset template with thin clones", "PUT", "/api/domains/" + tplWithClones + "/template/", map[string]any{"template": false}, "detail", "thin clones"},
		{"start a template", "POST", "/api/domains/" + tplWithClones + "/start/", nil, "detail", "template"},
		{"ssh-inject into windows", "POST", "/api/domains/" + win + "/ssh-inject/", map[string]any{"ssh_key": "k"}, "detail", "Linux"},
		{"ssh-inject into running VM without agent", "POST", "/api/domains/" + linux + "/ssh-inject/", map[string]any{"ssh_key": "k"}, "detail", "agent"},
		{"ssh-inject without key", "POST", "/api/domains/" + linux + "/ssh-inject/", nil, "ssh_key", "required"},
		{"template flag missing", "PUT", "/api/domains/" + linux + "/template/", nil, "template", "required"},
		{"clone without name", "POST", "/api/domains/" + tplWithClones + "/clone/", map[string]any{}, "verbose_name", "required"},
		{"clone to unknown node", "POST", "/api/domains/" + tplWithClones + "/clone/", map[string]any{"verbose_name": "x", "node": "nope"}, "node", "not found"},
		{"backup with fractional limit_days", "POST", "/api/domains/backup/", map[string]any{"domain": linux, "limit_days": 1.5}, "limit_days", "integer"},
		{"backup of unknown domain", "POST", "/api/domains/backup/", map[string]any{"domain": "nope"}, "domain", "not found"},
		{"guest command without agent", "POST", "/api/domains/" + linux + "/guest-command/", map[string]any{"qemu_cmd": "guest-ping"}, "detail", "not active"},
		{"unknown guest command", "POST", "/api/domains/" + linux + "/guest-command/", map[string]any{"qemu_cmd": "guest-nope"}, "qemu_cmd", "Unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do(tc.method, tc.path, tc.body)
			if st != 400 {
				t.Fatalf("status %d, want 400: %s", st, b)
			}
			e := errorOf(t, b)
			if e["msg_key"] != tc.key || !strings.Contains(strings.ToLower(e[tc.key].(string)), strings.ToLower(tc.contains)) {
				t.Fatalf("error %v, want msg_key %s mentioning %q", e, tc.key, tc.contains)
			}
		})
	}
}

func TestGuestCommands(t *testing.T) {
	s, c := newSim(t, Options{VMs: 30, Templates: -1, RunningFraction: 1, AgentFraction: 1, LinuxFraction: 0.5})
	linux := pickVM(t, s, func(d DomainInfo) bool { return d.Linux })
	win := pickVM(t, s, func(d DomainInfo) bool { return !d.Linux })
	cmd := func(vm, name string, extra map[string]any) (int, map[string]any, []byte) {
		body := map[string]any{"qemu_cmd": name, "fargs": map[string]any{}}
		for k, v := range extra {
			body[k] = v
		}
		st, b := c.do("POST", "/api/domains/"+vm+"/guest-command/", body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return st, v, b
	}

	v := c.json("GET", "/api/domains/"+linux+"/available-guest-cmds/", nil, 200)
	if cmds := v["qemu_available_cmds"].([]any); len(cmds) != 40 || cmds[0] != "guest-ssh-remove-authorized-keys" || cmds[39] != "guest-sync-delimited" {
		t.Fatalf("available commands: %d %v", len(cmds), cmds)
	}

	t.Run("linux answers", func(t *testing.T) {
		if st, v, b := cmd(linux, "guest-ping", nil); st != 200 || len(v["guest-ping"].(map[string]any)) != 0 {
			t.Fatalf("ping %d %s", st, b)
		}
		_, v, _ = cmd(linux, "guest-get-osinfo", nil)
		if id := v["guest-get-osinfo"].(map[string]any)["id"]; id != "ubuntu" && id != "debian" {
			t.Fatalf("linux os id %v", id)
		}
		_, v, _ = cmd(linux, "guest-get-fsinfo", nil)
		var tmpfs, noSize bool
		for _, f := range v["guest-get-fsinfo"].([]any) {
			fs := f.(map[string]any)
			tmpfs = tmpfs || fs["type"] == "tmpfs"
			_, has := fs["total-bytes"]
			noSize = noSize || !has
		}
		if !tmpfs || !noSize {
			t.Fatalf("fsinfo lacks tmpfs (%v) or a mount without sizes (%v)", tmpfs, noSize)
		}
		_, v, _ = cmd(linux, "guest-get-host-name", nil)
		if v["guest-get-host-name"].(map[string]any)["host-name"] == "" {
			t.Fatal("no host-name")
		}
		_, v, _ = cmd(linux, "guest-info", nil)
		if sc := v["guest-info"].(map[string]any)["supported_commands"].([]any); len(sc) != 40 {
			t.Fatalf("guest-info lists %d commands", len(sc))
		}
		_, v, _ = cmd(linux, "guest-network-get-interfaces", nil)
		if ifs := v["guest-network-get-interfaces"].([]any); len(ifs) < 2 {
			t.Fatalf("interfaces %v", ifs)
		}
	})

	t.Run("guest time includes the clock offset", func(t *testing.T) {
		if err := s.SetClockOffset(linux, time.Hour); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		st, _, b := cmd(linux, "guest-get-time", nil)
		var raw map[string]json.Number
		if st != 200 || json.Unmarshal(b, &raw) != nil {
			t.Fatalf("time %d %s", st, b)
		}
		ns, err := raw["guest-get-time"].Int64()
		if err != nil {
			t.Fatalf("guest-get-time is not an integer: %s", b)
		}
		off := time.Unix(0, ns).Sub(before)
		if off < 59*time.Minute || off > 61*time.Minute {
			t.Fatalf("offset %v, want about 1h", off)
		}
	})

	t.Run("windows is refused by default", func(t *testing.T) {
		st, _, b := cmd(win, "guest-ping", nil)
		if st != 400 || !strings.Contains(errorOf(t, b)["detail"].(string), "Linux") {
			t.Fatalf("windows: %d %s", st, b)
		}
	})

	t.Run("agent off", func(t *testing.T) {
		vm := pickVM(t, s, func(d DomainInfo) bool { return d.Linux && d.ID != linux })
		_ = s.SetGuestAgent(vm, false)
		if st, _, b := cmd(vm, "guest-ping", nil); st != 400 {
			t.Fatalf("agent off: %d %s", st, b)
		}
		_ = s.PowerOff(linux)
		st, _, b := cmd(linux, "guest-ping", nil)
		if st != 400 || !strings.Contains(errorOf(t, b)["detail"].(string), "not running") {
			t.Fatalf("powered off: %d %s", st, b)
		}
		_ = s.PowerOn(linux)
	})

	t.Run("hung agent times out", func(t *testing.T) {
		_ = s.SetGuestHang(linux, true)
		defer s.SetGuestHang(linux, false)
		start := time.Now()
		st, _, b := cmd(linux, "guest-ping", map[string]any{"timeout": 0.2})
		if st != 400 || !strings.Contains(errorOf(t, b)["detail"].(string), "guest agent timeout") {
			t.Fatalf("hang: %d %s", st, b)
		}
		if time.Since(start) < 200*time.Millisecond {
			t.Fatal("hung command answered before its timeout")
		}
	})

	t.Run("windows allowed by option", func(t *testing.T) {
		s2, c2 := newSim(t, Options{VMs: 3, LinuxFraction: -1, RunningFraction: 1, AgentFraction: 1, GuestCommandsWindows: true})
		v := c2.json("POST", "/api/domains/"+s2.DomainIDs()[0]+"/guest-command/", map[string]any{"qemu_cmd": "guest-get-osinfo"}, 200)
		if id := v["guest-get-osinfo"].(map[string]any)["id"]; id != "mswindows" {
			t.Fatalf("windows os id %v", id)
		}
	})
}

func eventIDs(t *testing.T, c *client, q string) []string {
	t.Helper()
	var ids []string
	for _, e := range results(t, c.json("GET", "/api/events/?"+q, nil, 200)) {
		ids = append(ids, e["id"].(string))
	}
	return ids
}

func TestEventsOrderingRetentionAndSameCreated(t *testing.T) {
	for _, order := range []string{"newest_first", "oldest_first"} {
		t.Run(order, func(t *testing.T) {
			s, c := newSim(t, Options{VMs: 3, EventsOrder: order})
			ids := s.AddEvents(5, EventSpec{Type: "warning"})
			got := eventIDs(t, c, "")
			want := ids
			if order == "newest_first" {
				want = []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("default order %v, want %v", got, want)
			}
			asc := eventIDs(t, c, "ordering=created")
			desc := eventIDs(t, c, "ordering=-created")
			if asc[0] != ids[0] || desc[0] != ids[4] {
				t.Fatalf("ordering parameter ignored: asc %v desc %v", asc, desc)
			}
			if n := len(eventIDs(t, c, "type=warning")); n != 5 {
				t.Fatalf("type filter returned %d", n)
			}
		})
	}

	t.Run("same created instant", func(t *testing.T) {
		sim, c := newSim(t, Options{VMs: 3})
		sim.AddEvents(4, EventSpec{SameCreated: true, Type: "error", EntityClass: "node"})
		rs := results(t, c.json("GET", "/api/events/?type=error", nil, 200))
		if len(rs) != 4 {
			t.Fatalf("%d events", len(rs))
		}
		for _, e := range rs {
			if e["created"] != rs[0]["created"] || e["entities"].([]any)[0].(map[string]any)["entity_class"] != "node" {
				t.Fatalf("events differ: %v vs %v", e, rs[0])
			}
		}
	})

	t.Run("retention deletes oldest", func(t *testing.T) {
		s, c := newSim(t, Options{VMs: 3, EventsRetention: 10})
		ids := s.AddEvents(25, EventSpec{})
		if n := s.EventCount(); n != 10 {
			t.Fatalf("%d events kept", n)
		}
		got := eventIDs(t, c, "ordering=created")
		if got[0] != ids[15] || got[9] != ids[24] {
			t.Fatalf("kept %v, want the newest 10", got)
		}
		if st, _ := c.do("GET", "/api/events/"+ids[0]+"/", nil); st != 404 {
			t.Fatalf("deleted event answers %d", st)
		}
		if n := s.DeleteOldestEvents(3); n != 3 || s.EventCount() != 7 {
			t.Fatalf("DeleteOldestEvents removed %d, %d left", n, s.EventCount())
		}
	})

	t.Run("background rate", func(t *testing.T) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		s, c := newSim(t, Options{VMs: 3, EventRate: 10, Now: clock})
		mu.Lock()
		now = now.Add(3 * time.Second)
		mu.Unlock()
		// 30 events are due; operations started in the last moments have not finished yet.
		v := c.json("GET", "/api/events/?limit=0", nil, 200)
		got := int(v["count"].(float64))
		if got < 24 || got > 30 {
			t.Fatalf("after 3s at 10/s: %d events, want about 30", got)
		}
		// Rate 0 stops the activity at once: its running tasks end now (their final events are
		// written), then the journal holds still.
		s.SetEventRate(0)
		if st := s.Summary(); st.TasksRunning != 0 {
			t.Fatalf("%d background tasks still running after rate 0", st.TasksRunning)
		}
		after := int(c.json("GET", "/api/events/?limit=0", nil, 200)["count"].(float64))
		if after < got || after > 32 {
			t.Fatalf("rate 0: %d events after %d", after, got)
		}
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		if n := s.EventCount(); n != after {
			t.Fatalf("rate 0 still generates: %d -> %d", after, n)
		}
	})
}

func TestFaultsOfEachKind(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3})
	get := func() (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", s.URL+"/api/events/?limit=5", nil)
		req.Header.Set("Authorization", "jwt "+s.Token)
		// A fresh connection each time: net/http silently retries a GET whose reused
		// connection was reset, which would hide the fault.
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	for _, tc := range []struct {
		name  string
		fault Fault
		check func(t *testing.T, resp *http.Response, b []byte, err error)
	}{
		{"status 503 with error body", Fault{Path: "/api/events/*", Kind: "status", Status: 503}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 503 || errorOf(t, b)["code"] != "503" {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"html proxy page", Fault{Path: "/api/events", Kind: "html"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(b, []byte("<html>")) {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"truncated JSON", Fault{Kind: "truncated"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			var v any
			if err != nil || resp.StatusCode != 200 || json.Unmarshal(b, &v) == nil || !bytes.HasPrefix(b, []byte(`{"count"`)) {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"connection reset", Fault{Kind: "reset", Method: "GET"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err == nil {
				t.Fatalf("no error after reset: %v", resp)
			}
		}},
		{"wrong types", Fault{Kind: "wrong_types"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			var v map[string]any
			if err != nil || json.Unmarshal(b, &v) != nil {
				t.Fatalf("%v %s", err, b)
			}
			if _, ok := v["count"].(string); !ok {
				t.Fatalf("count not a string: %s", b)
			}
		}},
		{"latency", Fault{Kind: "latency", Latency: 150 * time.Millisecond}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", err, resp)
			}
			if r := s.Requests(); r[len(r)-1].Duration < 150*time.Millisecond {
				t.Fatalf("logged duration %v", r[len(r)-1].Duration)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fault.Count = 1
			s.SetFaults(tc.fault)
			resp, b, err := get()
			tc.check(t, resp, b, err)
			// Count 1: the next request is healthy again.
			if resp, b, err := get(); err != nil || resp.StatusCode != 200 {
				t.Fatalf("fault fired twice: %v %v %s", err, resp, b)
			}
		})
	}

	t.Run("non-matching path and method are untouched", func(t *testing.T) {
		s.SetFaults(Fault{Path: "/api/nodes/*", Kind: "status"}, Fault{Method: "POST", Kind: "status"})
		defer s.ClearFaults()
		if resp, _, err := get(); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		if st, _ := c.do("GET", "/api/nodes/", nil); st != 500 {
			t.Fatalf("nodes fault not applied: %d", st)
		}
	})

	t.Run("fault rate answers 500 503 or 418", func(t *testing.T) {
		s.SetFaultRate(1)
		defer s.SetFaultRate(0)
		seen := map[int]bool{}
		for range 30 {
			st, b := c.do("GET", "/api/domains/", nil)
			if st != 500 && st != 503 && st != 418 {
				t.Fatalf("status %d", st)
			}
			errorOf(t, b)
			seen[st] = true
		}
		if len(seen) < 2 {
			t.Fatalf("fault statuses not random: %v", seen)
		}
	})

	t.Run("control API sets faults and is never faulted", func(t *testing.T) {
		resp, err := http.Post(s.URL+"/_sim/faults", "application/json", strings.NewReader(`[{"kind":"status","status":418}]`))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		resp.Body.Close()
		if st, _ := c.do("GET", "/api/nodes/", nil); st != 418 {
			t.Fatalf("status %d, want 418", st)
		}
		resp, err = http.Get(s.URL + "/_sim/state")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		resp.Body.Close()
		resp, _ = http.Post(s.URL+"/_sim/faults", "application/json", strings.NewReader(`[]`))
		resp.Body.Close()
		if st, _ := c.do("GET", "/api/nodes/", nil); st != 200 {
			t.Fatalf("empty list did not clear faults: %d", st)
		}
	})
}

func TestRequestLogAndInFlightMax(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3, Latency: 100 * time.Millisecond})
	s.ResetRequests()
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.do("GET", "/api/nodes/?limit=2", nil)
		}()
	}
	wg.Wait()
	if m := s.InFlightMax(); m < 2 || m > 5 {
		t.Fatalf("InFlightMax %d with 5 concurrent slow requests", m)
	}
	s.SetLatency(0, 0)
	c.do("POST", "/api/domains/"+s.DomainIDs()[0]+"/shutdown/?async=1", map[string]any{"force": true})
	http.Get(s.URL + "/_sim/state")
	log := s.Requests()
	if len(log) != 6 {
		t.Fatalf("%d requests logged, want 6 (control API excluded)", len(log))
	}
	for _, r := range log[:5] {
		if r.Method != "GET" || r.Path != "/api/nodes/" || r.Query != "limit=2" || r.Status != 200 || r.Duration < 100*time.Millisecond {
			t.Fatalf("logged %+v", r)
		}
	}
	if last := log[5]; last.Method != "POST" || last.Status != 202 || !strings.Contains(last.Body, `"force":true`) {
		t.Fatalf("logged %+v", last)
	}
	s.ResetRequests()
	if len(s.Requests()) != 0 || s.InFlightMax() != 0 {
		t.Fatal("ResetRequests left entries")
	}
}

func TestSameSeedSameInventory(t *testing.T) {
	fixed := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	body := func(seed int64, path string) string {
		s := New(Options{Seed: seed, VMs: 50, Nodes: 7, InitialEvents: 30, Now: fixed})
		defer s.Close()
		_, b := newClient(t, s).do("GET", path, nil)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		r, _ := json.Marshal(v["results"])
		return string(r)
	}
	for _, p := range []string{"/api/domains/", "/api/nodes/", "/api/events/", "/api/tasks/", "/api/data-pools/"} {
		if a, b := body(7, p), body(7, p); a != b {
			t.Fatalf("%s differs between two servers with the same seed", p)
		}
	}
	if body(7, "/api/domains/") == body(8, "/api/domains/") {
		t.Fatal("different seeds gave the same domains")
	}
}

func TestDriversChangeState(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, Templates: -1, RunningFraction: 1, AgentFraction: -1})
	vm := s.DomainIDs()[0]
	d := c.json("GET", "/api/domains/"+vm+"/", nil, 200)
	if gu := d["guest_utils"].(map[string]any); len(gu) != 0 {
		t.Fatalf("guest_utils without agent: %v", gu)
	}
	if err := s.SetGuestAgent(vm, true); err != nil {
		t.Fatal(err)
	}
	d = c.json("GET", "/api/domains/?ids="+vm, nil, 200)
	if gu := results(t, d)[0]["guest_utils"].(map[string]any); gu["qemu_state"] != true {
		t.Fatalf("guest_utils after agent on: %v", gu)
	}
	node := s.NodeIDs()[2]
	for _, path := range []string{"power_off", "migrate"} {
		resp, err := http.Post(s.URL+"/_sim/domains/"+vm+"/"+path, "application/json", strings.NewReader(`{"node":"`+node+`"}`))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	d = c.json("GET", "/api/domains/"+vm+"/", nil, 200)
	if d["user_power_state"] != float64(1) || d["node"].(map[string]any)["id"] != node {
		t.Fatalf("after power_off+migrate: %v", d)
	}
	if v := c.json("GET", "/api/domains/?power_state=off", nil, 200); v["count"] != float64(1) {
		t.Fatalf("power_state filter: %v", v["count"])
	}
	if err := s.DeleteVM(vm); err != nil {
		t.Fatal(err)
	}
	if err := s.PowerOn(vm); err == nil {
		t.Fatal("PowerOn of a deleted VM succeeded")
	}
	ids := s.AddVMs(3)
	if v := c.json("GET", "/api/domains/?limit=0", nil, 200); v["count"] != float64(12) || len(ids) != 3 {
		t.Fatalf("after delete and add: %v", v["count"])
	}
	n := c.json("GET", "/api/nodes/"+node+"/", nil, 200)
	var want float64
	for _, id := range s.DomainIDs() {
		if x, _ := s.Domain(id); x.NodeID == node {
			want++
		}
	}
	if n["domains_count"] != want {
		t.Fatalf("node domains_count %v, want %v", n["domains_count"], want)
	}
}

func TestScaleInventoryServesPages(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10000, Nodes: 500, InitialEvents: 100000, Templates: 50})
	if v := c.json("GET", "/api/domains/?offset=9950&limit=100", nil, 200); v["count"] != float64(10000) || len(results(t, v)) != 50 {
		t.Fatalf("domains page: %v", v["count"])
	}
	if v := c.json("GET", "/api/nodes/?offset=400", nil, 200); v["count"] != float64(500) || len(results(t, v)) != 100 {
		t.Fatalf("nodes page: %v", v["count"])
	}
	if v := c.json("GET", "/api/events/?offset=99990", nil, 200); v["count"] != float64(100000) || len(results(t, v)) != 10 {
		t.Fatalf("events page: %v", v["count"])
	}
	if v := c.json("GET", "/api/domains/?ordering=-verbose_name&limit=2", nil, 200); len(results(t, v)) != 2 {
		t.Fatal("ordering page")
	}
	_ = s
}
