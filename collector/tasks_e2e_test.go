package collector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestTaskLabelsNameNoVMEndToEnd: tasks run on several VMs of the simulator (starts, shutdowns,
// backups, one VM deleted); the exposition then has no VM name in any task label, backup series
// for the VMs backed up, and an exporter started afterwards shows the same last backups.
func TestTaskLabelsNameNoVMEndToEnd(t *testing.T) {
	cc := testCollect()
	f := newFixture(t, veiltest.Options{Seed: 31, VMs: 8, InitialTasks: 10, TaskDuration: 20 * time.Millisecond}, cc, veil.Config{})
	f.mustRefresh(t)
	c, err := veil.New(veil.Config{URL: f.sim.URL, Token: f.sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := veilops.New(f.sim.URL, f.sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ids := f.sim.DomainIDs()
	names := map[string]string{}
	for _, d := range f.inv.Domains() {
		names[d.ID] = d.VerboseName
	}
	wait := func(env *veilops.TaskEnvelope, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ops.WaitTask(ctx, env.Task.ID, 10*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids[:4] {
		startAndWait(t, f, id)
		wait(ops.BackupDomain(ctx, id, "", false, 1))
	}
	f.mustRefresh(t)
	victim := ids[5]
	wait(ops.RemoveDomain(ctx, victim, true))
	f.mustRefresh(t)

	task := append(series(t, f.inv, "veil_tasks_finished_total"), series(t, f.inv, "veil_task_duration_seconds_count")...)
	if len(task) == 0 {
		t.Fatal("no task series")
	}
	for _, s := range task {
		labels := s[:strings.LastIndexByte(s, ' ')]
		for _, n := range names {
			if containsWord(labels, n) {
				t.Errorf("task series %q carries the VM name %q", s, n)
			}
		}
	}
	for _, id := range ids[:4] {
		if v := value(t, f.inv, "veil_domain_last_backup_success", id); v != "1" {
			t.Errorf("VM %s backed up: last backup success %s", id, v)
		}
	}
	if s := series(t, f.inv, victim); len(s) != 0 {
		t.Errorf("deleted VM still has series: %q", s)
	}

	// A restart: the journal gives the same last backups.
	restarted, err := newTestInventory(c, cc, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := strings.Join(series(t, f.inv, "veil_domain_last_backup"), "\n")
	if after := strings.Join(series(t, restarted, "veil_domain_last_backup"), "\n"); after != before || before == "" {
		t.Errorf("after a restart the last backups differ:\nbefore %s\nafter %s", before, after)
	}
}
