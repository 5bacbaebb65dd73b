package veilops_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// newSim starts a simulator closed with the test.
func newSim(t testing.TB, o veiltest.Options) *veiltest.Server {
	t.Helper()
	s := veiltest.New(o)
	t.Cleanup(s.Close)
	return s
}

func newOperator(t testing.TB, sim *veiltest.Server) *veilops.Operator {
	t.Helper()
	o, err := veilops.New(sim.URL, sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func findDomain(t testing.TB, sim *veiltest.Server, ok func(veiltest.DomainInfo) bool) veiltest.DomainInfo {
	t.Helper()
	for _, id := range sim.DomainIDs() {
		if d, found := sim.Domain(id); found && ok(d) {
			return d
		}
	}
	t.Fatal("no domain matches")
	return veiltest.DomainInfo{}
}

func TestOperationsChangeStateThroughTasks(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 3, VMs: 40, TaskDuration: 30 * time.Millisecond})
	c := newOperator(t, sim)
	ctx := context.Background()
	wait := func(env *veil.TaskEnvelope, err error) *veil.Task {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if env.Task.ID == "" {
			t.Fatalf("no task in envelope %+v", env)
		}
		var polls int
		task, err := c.WaitTask(ctx, env.Task.ID, 10*time.Millisecond, func(veil.Task) { polls++ })
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != veil.TaskSuccess || polls == 0 {
			t.Fatalf("task %s ended %s after %d polls (%s)", task.Name, task.Status, polls, task.ErrorMessage)
		}
		return task
	}

	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool {
		return d.PowerState == veil.PowerOff && !d.Template && d.Linux
	})
	wait(c.StartDomain(ctx, off.ID, false))
	if d, _ := sim.Domain(off.ID); d.PowerState != veil.PowerOn {
		t.Errorf("after start: power %d", d.PowerState)
	}
	wait(c.ShutdownDomain(ctx, off.ID, true))
	if d, _ := sim.Domain(off.ID); d.PowerState != veil.PowerOff {
		t.Errorf("after shutdown: power %d", d.PowerState)
	}
	wait(c.SSHInject(ctx, off.ID, false, "", "ssh-ed25519 AAAA test"))
	wait(c.SetTemplate(ctx, off.ID, true))
	if d, _ := sim.Domain(off.ID); !d.Template {
		t.Errorf("after template: not a template")
	}
	env, err := c.CloneDomain(ctx, off.ID, sim.NodeIDs()[0], "clone-of-test", sim.DatapoolIDs()[0])
	wait(env, err)
	var entity struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(env.Entity, &entity); err != nil || entity.ID == "" {
		t.Fatalf("clone envelope entity %s: %v", env.Entity, err)
	}
	if d, ok := sim.Domain(entity.ID); !ok || d.ParentID != off.ID {
		t.Errorf("clone %s: %+v, parent want %s", entity.ID, d, off.ID)
	}
	// A template with a thin clone cannot be modified: a 400 that says why.
	if _, err := c.SetTemplate(ctx, off.ID, false); err == nil || !strings.Contains(err.Error(), "400 bad request") {
		t.Errorf("SetTemplate on a template with clones: %v", err)
	}
	wait(c.BackupDomain(ctx, entity.ID, sim.DatapoolIDs()[0], true, 7))
	wait(c.RemoveDomain(ctx, entity.ID, true))
	if _, ok := sim.Domain(entity.ID); ok {
		t.Errorf("clone still there after remove")
	}
	wait(c.SetBallooning(ctx, sim.NodeIDs()[0], true))
	reads, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := reads.Node(ctx, sim.NodeIDs()[0]); err != nil || n.Ballooning == nil || !*n.Ballooning {
		t.Errorf("ballooning not on: %+v, %v", n, err)
	}

	checkKeys(t, sim)
}

func TestWaitTaskStopsWithContext(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 4, TaskDuration: time.Hour})
	c := newOperator(t, sim)
	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return d.PowerState == veil.PowerOff && !d.Template })
	env, err := c.StartDomain(context.Background(), off.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.WaitTask(ctx, env.Task.ID, 5*time.Millisecond, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitTask = %v, want deadline exceeded", err)
	}
}

func TestOperationRetriedWithTheSameKey(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 9, VMs: 50})
	o := newOperator(t, sim)
	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return d.PowerState == veil.PowerOff && !d.Template })
	sim.SetFaults(veiltest.Fault{Path: "/api/domains/*/start/", Kind: "status", Status: 503, Count: 2})
	sim.ResetRequests()
	if _, err := o.StartDomain(context.Background(), off.ID, false); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, r := range sim.Requests() {
		if r.Method == "POST" && strings.HasPrefix(r.Path, "/api/domains/"+off.ID+"/start") {
			bodies = append(bodies, r.Body)
		}
	}
	if len(bodies) != 3 {
		t.Fatalf("%d requests, want 3 (two 503 then the answer)", len(bodies))
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] || !strings.Contains(b, "idempotency_key") {
			t.Errorf("retry body %s differs from first %s", b, bodies[0])
		}
	}
}

func TestReadOnlyTokenCannotOperate(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 5, VMs: 50, ReadOnlyToken: "read-only-secret"})
	o, err := veilops.New(sim.URL, "read-only-secret")
	if err != nil {
		t.Fatal(err)
	}
	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return d.PowerState == veil.PowerOff && !d.Template })
	if _, err := o.StartDomain(context.Background(), off.ID, false); err == nil || !strings.Contains(err.Error(), "403 forbidden") {
		t.Fatalf("StartDomain with a read-only token: %v, want 403", err)
	}
}

// checkKeys: every operation was sent with ?async=1 and a fresh UUIDv4 idempotency key.
func checkKeys(t *testing.T, sim *veiltest.Server) {
	t.Helper()
	keys := map[string]bool{}
	for _, r := range sim.Requests() {
		if r.Method == "GET" {
			continue
		}
		if !strings.Contains(r.Query, "async=1") {
			t.Errorf("%s %s without async=1", r.Method, r.Path)
		}
		var body struct {
			Key string `json:"idempotency_key"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil || len(body.Key) != 36 || body.Key[14] != '4' {
			t.Errorf("%s %s: body %s has no UUIDv4 key", r.Method, r.Path, r.Body)
		}
		if keys[body.Key] {
			t.Errorf("key %s reused across operations", body.Key)
		}
		keys[body.Key] = true
	}
}
