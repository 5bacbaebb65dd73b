package veiltest

// Conformance of operation answers through raw HTTP: without ?async=1 an
// operation answers 200 with the resource once its task is done (start, shutdown, template →
// the VM, as the vendor's Go client expects), with ?async=1 202 and the task envelope; a
// repeated idempotency key still never runs the operation again.

import (
	"testing"
	"time"
)

func TestOperationsWithoutAsyncAnswerTheResource(t *testing.T) {
	s, c := newSim(t, Options{VMs: 20, Templates: 2, TaskDuration: 20 * time.Millisecond,
		RunningFraction: 1, AgentFraction: 1, LinuxFraction: 1})
	vm := pickVM(t, s, func(d DomainInfo) bool { return !d.Template && !d.Thin })
	tpl := pickVM(t, s, func(d DomainInfo) bool { return d.Template })
	node := s.NodeIDs()[0]
	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
		check              func(t *testing.T, v map[string]any)
	}{
		{"shutdown answers the VM powered off", "POST", "/api/domains/" + vm + "/shutdown/", map[string]any{"force": true}, func(t *testing.T, v map[string]any) {
			if v["id"] != vm || v["user_power_state"] != float64(1) {
				t.Fatalf("%v", v)
			}
		}},
		{"template answers the VM with template true", "PUT", "/api/domains/" + vm + "/template/", map[string]any{"template": true}, func(t *testing.T, v map[string]any) {
			if v["id"] != vm || v["template"] != true {
				t.Fatalf("%v", v)
			}
		}},
		{"template false answers the VM", "PUT", "/api/domains/" + vm + "/template/", map[string]any{"template": false}, func(t *testing.T, v map[string]any) {
			if v["id"] != vm || v["template"] != false {
				t.Fatalf("%v", v)
			}
		}},
		{"start answers the VM powered on", "POST", "/api/domains/" + vm + "/start/", nil, func(t *testing.T, v map[string]any) {
			if v["id"] != vm || v["user_power_state"] != float64(3) {
				t.Fatalf("%v", v)
			}
		}},
		{"ssh-inject answers the VM", "POST", "/api/domains/" + vm + "/ssh-inject/", map[string]any{"ssh_key": "ssh-ed25519 AAAA k"}, func(t *testing.T, v map[string]any) {
			if v["id"] != vm {
				t.Fatalf("%v", v)
			}
		}},
		{"clone answers the created VM", "POST", "/api/domains/" + tpl + "/clone/", map[string]any{"verbose_name": "sync-clone"}, func(t *testing.T, v map[string]any) {
			if v["verbose_name"] != "sync-clone" || v["status"] != "ACTIVE" || v["thin"] != true {
				t.Fatalf("%v", v)
			}
		}},
		{"ballooning answers the node", "PUT", "/api/nodes/" + node + "/ballooning/", map[string]any{"ballooning": false}, func(t *testing.T, v map[string]any) {
			if v["id"] != node || v["ballooning"] != false {
				t.Fatalf("%v", v)
			}
		}},
		{"backup answers its final task", "POST", "/api/domains/backup/", map[string]any{"domain": vm}, func(t *testing.T, v map[string]any) {
			if v["status"] != "SUCCESS" || v["name"] == "" || v["finished_time"] == nil {
				t.Fatalf("%v", v)
			}
		}},
		{"remove answers its final task", "POST", "/api/domains/" + vm + "/remove/", nil, func(t *testing.T, v map[string]any) {
			if v["status"] != "SUCCESS" {
				t.Fatalf("%v", v)
			}
			if st, _ := c.do("GET", "/api/domains/"+vm+"/", nil); st != 404 {
				t.Fatalf("removed VM answers %d", st)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := c.json(tc.method, tc.path, tc.body, 200)
			if _, ok := v["_task"]; ok {
				t.Fatalf("synchronous answer is an envelope: %v", v)
			}
			tc.check(t, v)
		})
	}
}

func TestOperationsWithAsyncAnswerTheEnvelope(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, Templates: -1, TaskDuration: time.Hour, RunningFraction: 1})
	vm := s.DomainIDs()[0]
	env := c.json("POST", "/api/domains/"+vm+"/shutdown/?async=1", nil, 202)
	tk, ok := env["_task"].(map[string]any)
	if !ok || tk["status"] != "IN_PROGRESS" {
		t.Fatalf("envelope %v", env)
	}
	if e, ok := env["_entity"].(map[string]any); !ok || e["id"] != vm {
		t.Fatalf("envelope entity %v", env["_entity"])
	}
	env = c.json("POST", "/api/domains/backup/?async=1", map[string]any{"domain": vm}, 202)
	if _, ok := env["_entity"]; ok || env["_task"] == nil {
		t.Fatalf("backup envelope %v: data_without_entity expected", env)
	}
}

func TestSynchronousFailureAnswers400(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, Templates: -1, TaskDuration: 10 * time.Millisecond, TaskFailureRate: 1})
	st, b := c.do("POST", "/api/domains/"+s.DomainIDs()[0]+"/shutdown/", nil)
	if st != 400 || errorOf(t, b)["detail"] != "Simulated failure." {
		t.Fatalf("failed synchronous operation: %d %s", st, b)
	}
}

func TestRepeatedKeyWithoutAsyncDoesNotRunAgain(t *testing.T) {
	s, c := newSim(t, Options{VMs: 5, Templates: -1, TaskDuration: 10 * time.Millisecond, RunningFraction: -1})
	vm := s.DomainIDs()[0]
	key := "6f1c5a52-4b7e-4d8e-9a0f-1c2d3e4f5a6b"
	if v := c.json("POST", "/api/domains/"+vm+"/start/", map[string]any{"idempotency_key": key}, 200); v["user_power_state"] != float64(3) {
		t.Fatalf("first start: %v", v)
	}
	if err := s.PowerOff(vm); err != nil {
		t.Fatal(err)
	}
	again := c.json("POST", "/api/domains/"+vm+"/start/", map[string]any{"idempotency_key": key}, 200)
	if again["id"] != vm {
		t.Fatalf("repeated start: %v", again)
	}
	if d, _ := s.Domain(vm); d.PowerState != 1 {
		t.Fatal("a repeated key started the VM again")
	}
}
