package veiltest

// This file holds the tests of state-changing operations through raw HTTP: tasks and what they
// change, idempotency keys, rule violations, guest commands, and the Go drivers that change
// state behind the API.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pickVM returns the first VM that pred accepts.
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

	t.Run("clone of a template is a thin clone", func(t *testing.T) { cloneIsThin(t, s, c, node2) })

	t.Run("template flag and remove", func(t *testing.T) { templateAndRemove(t, s, c, vm, plain) })
}

// templateAndRemove: the template flag is set, and a removed VM is gone (404).
func templateAndRemove(t *testing.T, s *Server, c *client, vm string, plain func(DomainInfo) bool) {
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
}

// cloneIsThin: a clone of a template is created thin, on the node asked, and found by name.
func cloneIsThin(t *testing.T, s *Server, c *client, node2 string) {
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
	// A Linux guest with an older agent: the spec's 40 commands (guest_stats_test.go has the
	// newer).
	linux := pickVM(t, s, func(d DomainInfo) bool { return d.Linux && len(d.GuestCommands) == 40 })
	win := pickVM(t, s, func(d DomainInfo) bool { return !d.Linux })
	cmd := guestCmd(func(vm, name string, extra map[string]any) (int, map[string]any, []byte) {
		body := map[string]any{"qemu_cmd": name, "fargs": map[string]any{}}
		for k, v := range extra {
			body[k] = v
		}
		st, b := c.do("POST", "/api/domains/"+vm+"/guest-command/", body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return st, v, b
	})

	v := c.json("GET", "/api/domains/"+linux+"/available-guest-cmds/", nil, 200)
	if cmds := v["qemu_available_cmds"].([]any); len(cmds) != 40 || cmds[0] != "guest-ssh-remove-authorized-keys" || cmds[39] != "guest-sync-delimited" {
		t.Fatalf("available commands: %d %v", len(cmds), cmds)
	}

	t.Run("linux answers", func(t *testing.T) { linuxGuestAnswers(t, linux, cmd) })

	t.Run("guest time includes the clock offset", func(t *testing.T) { guestTimeOffset(t, s, linux, cmd) })

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

// guestTimeOffset: guest-get-time is the host's time plus the guest's clock offset, in integer
// nanoseconds.
func guestTimeOffset(t *testing.T, s *Server, linux string, cmd guestCmd) {
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
}

// linuxGuestAnswers: a Linux guest answers ping, osinfo, fsinfo (with tmpfs and a mount without
// sizes), host name, info and interfaces.
func linuxGuestAnswers(t *testing.T, linux string, cmd guestCmd) {
	var v map[string]any
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

// guestCmd sends a guest command (with extra fields in the body) and returns the status, the
// decoded answer and its bytes.
type guestCmd func(vm, name string, extra map[string]any) (int, map[string]any, []byte)
