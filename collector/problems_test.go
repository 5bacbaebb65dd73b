package collector

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestInventoryProblemsNameNodesNotActive: a node FAILED is a failure, one in SERVICE a state,
// both named, failures first; ACTIVE nodes are not listed.
func TestInventoryProblemsNameNodesNotActive(t *testing.T) {
	f := newFixture(t, veiltest.Options{Nodes: 4, VMs: 5, Seed: 3, InitialTasks: -1}, testCollect(), veil.Config{})
	nodes := f.sim.NodeIDs()
	if err := f.sim.SetNodeStatus(nodes[1], "SERVICE"); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.SetNodeStatus(nodes[2], "FAILED"); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	ps := f.inv.problems()
	if len(ps) != 2 {
		t.Fatalf("problems %+v, want the FAILED and the SERVICE node", ps)
	}
	if p := ps[0]; p.Kind != "node" || p.ID != nodes[2] || p.State != "FAILED" || !p.Failure || p.Name == "" || p.Name == p.ID {
		t.Errorf("first problem %+v, want node %s FAILED, a failure, by name", p, nodes[2])
	}
	if p := ps[1]; p.ID != nodes[1] || p.State != "SERVICE" || p.Failure {
		t.Errorf("second problem %+v, want node %s in SERVICE, not a failure", p, nodes[1])
	}
}

// TestInventoryProblemsListVMsNotBackedUp: against the simulator, nothing is listed while no VM
// has a backup; after one VM's backup succeeds the other VMs (not templates, not the one tagged
// no-backup) are listed by name after the failures.
func TestInventoryProblemsListVMsNotBackedUp(t *testing.T) {
	f := newFixture(t, veiltest.Options{Nodes: 2, VMs: 5, Templates: 1, Seed: 5, InitialTasks: -1, TaskDuration: 10 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	for _, p := range f.inv.problems() {
		if p.Kind == "backup" {
			t.Errorf("listed before any backup: %+v", p)
		}
	}
	ids := f.sim.DomainIDs()
	var vms []string
	for _, id := range ids {
		if d, _ := f.sim.Domain(id); !d.Template {
			vms = append(vms, id)
		}
	}
	if len(vms) == len(ids) || len(vms) < 3 {
		t.Fatalf("want a template and 3 VMs: %d VMs of %d", len(vms), len(ids))
	}
	if err := f.sim.SetTags(vms[1], "lab", inventory.NoBackupTag); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.SetNodeStatus(f.sim.NodeIDs()[0], "FAILED"); err != nil {
		t.Fatal(err)
	}
	c, err := veilops.New(f.sim.URL, f.sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	env, err := c.BackupDomain(ctx, vms[0], "", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := c.WaitTask(ctx, env.Task.ID, 10*time.Millisecond, nil); err != nil || done.Status != veil.TaskSuccess {
		t.Fatalf("backup task %+v: %v", done, err)
	}
	f.mustRefresh(t)
	ps := f.inv.problems()
	if len(ps) == 0 || ps[0].Kind != "node" {
		t.Fatalf("problems %+v: want the FAILED node first", ps)
	}
	var listed []string
	for _, p := range ps {
		if p.Kind == "backup" {
			listed = append(listed, p.ID)
			if p.Name == p.ID || p.State != "no successful backup within 7d" || p.Failure {
				t.Errorf("%+v: want the VM's name, state no successful backup within 7d, not a failure", p)
			}
		}
	}
	slices.Sort(listed)
	want := slices.Clone(vms[2:])
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("listed %v, want %v (not the backed-up %s, the no-backup %s or the template)", listed, want, vms[0], vms[1])
	}
}
