package veilops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
	wait := func(env *veilops.TaskEnvelope, err error) *veil.Task {
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

func TestTaskEnvelopeForms(t *testing.T) {
	for _, tc := range []struct {
		name, in, task, entity string
	}{
		{"_entity object", `{"_task":{"id":"t1","status":"IN_PROGRESS","executed":0},"_entity":{"id":"d1"}}`, "t1", `{"id":"d1"}`},
		{"entity uuid string", `{"_task":{"id":"t2","status":"SUCCESS","executed":"2.49"},"entity":"d2"}`, "t2", `"d2"`},
		{"without entity", `{"_task":{"id":"t3"}}`, "t3", ``},
		{"the object itself", `{"id":"d4","verbose_name":"vm"}`, "", `{"id":"d4","verbose_name":"vm"}`},
		{"null answer", `null`, "", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env veilops.TaskEnvelope
			if err := json.Unmarshal([]byte(tc.in), &env); err != nil {
				t.Fatal(err)
			}
			if env.Task.ID != tc.task || string(env.Entity) != tc.entity {
				t.Fatalf("got task %q entity %s; want %q %s", env.Task.ID, env.Entity, tc.task, tc.entity)
			}
		})
	}
}

// vendorEnvelope decodes a fixture of an operation's answer from veil's vendor fixtures.
func vendorEnvelope(file string) (*veilops.TaskEnvelope, error) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "veil", "testdata", "vendor", file))
	if err != nil {
		return nil, err
	}
	env := new(veilops.TaskEnvelope)
	return env, json.Unmarshal(b, env)
}

// vendorVM is the VM of the envelope fixtures.
const vendorVM = "6d3c1a52-3f7e-4f1b-9a55-0c2a51e4b001"

// TestVendorEnvelopesDecode: an operation's answer with "entity" or "_entity".
func TestVendorEnvelopesDecode(t *testing.T) {
	env, err := vendorEnvelope("envelope_entity.json")
	if err != nil {
		t.Fatal(err)
	}
	if env.Task.ID != "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e103" || string(env.Entity) != `"`+vendorVM+`"` {
		t.Errorf("entity envelope: task %q entity %s", env.Task.ID, env.Entity)
	}
	env, err = vendorEnvelope("envelope__entity.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref veil.Ref
	if env.Task.ID != "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e104" || ref.UnmarshalJSON(env.Entity) != nil || ref.ID != vendorVM {
		t.Errorf("_entity envelope: task %q entity %s", env.Task.ID, env.Entity)
	}
}

// FuzzTaskEnvelope: whatever decodes as an envelope encodes, and its encoding decodes to the
// same task and entity.
func FuzzTaskEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"_task":{"id":"t3","status":"FAILED"},"_entity":{"id":"d"}}`, `{"_task":{"id":"t4"},"entity":"d"}`,
		`{"id":"d4","verbose_name":"vm"}`, `null`, `{"_task":{"id":"t5","executed":[1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var env veilops.TaskEnvelope
		if json.Unmarshal(data, &env) != nil {
			return
		}
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatalf("accepted envelope does not encode: %v (%+v)", err, env)
		}
		var again veilops.TaskEnvelope
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("own encoding %s does not decode: %v", b, err)
		}
		if again.Task.ID != env.Task.ID || (env.Task.ID != "" && !bytes.Equal(again.Entity, env.Entity)) {
			t.Fatalf("round trip changed the envelope: %s", b)
		}
	})
}
