package collector

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
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
	ps := f.inv.Problems()
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

// TestGuestProblemsNameSilentAgentsAndSkewedClocks: a hung agent and a clock 5 s off are listed
// by VM name; healthy guests are not; a guest's state (agent not running) reads as a state in
// the last error, not as a failure.
func TestGuestProblemsNameSilentAgentsAndSkewedClocks(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(4), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	e.waitSweeps(1, 5*time.Second)
	if err := e.sim.SetGuestHang(ids[0], true); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetClockOffset(ids[1], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ids[0]: "guest", ids[1]: "clock"}
	e.eventually("the silent guest and the skewed clock listed", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		if len(ps) != len(want) {
			return false
		}
		for _, p := range ps {
			if want[p.ID] != p.Kind || !p.Failure || p.Name == p.ID {
				return false
			}
		}
		return true
	})
	if err := e.sim.SetGuestHang(ids[0], false); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetGuestAgent(ids[2], false); err != nil {
		t.Fatal(err)
	}
	e.eventually("the agent-not-running state is the last one, named", 10*time.Second, func() bool {
		st := e.gc.Status()
		return st.LastErrorDomainID == ids[2] && st.LastErrorReason == "agent_not_running" && st.LastIsState && st.LastErrorDomain != ids[2]
	})
}

// TestGuestProblemsNotListedWhileTheControllerFails: while the controller answers 500 to guest
// commands every ping fails, which says nothing of the guests: the list holds none of them (as
// the alert holds back), and lists the silent guest again once the controller answers.
func TestGuestProblemsNotListedWhileTheControllerFails(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(4), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	e.waitSweeps(1, 5*time.Second)
	if err := e.sim.SetGuestHang(ids[0], true); err != nil {
		t.Fatal(err)
	}
	e.eventually("the silent guest listed", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		return len(ps) == 1 && ps[0].ID == ids[0]
	})
	e.sim.SetFaults(veiltest.Fault{Path: "/api/domains/*/guest-command/", Kind: "status", Status: 500})
	e.eventually("the guest collector failing and no guest listed", 10*time.Second, func() bool {
		return !e.gc.RunStatus()[0].Success && len(e.gc.Problems()) == 0
	})
	for _, p := range e.gc.Problems() {
		t.Errorf("listed while the controller fails: %+v", p)
	}
	e.sim.ClearFaults()
	e.eventually("the silent guest listed again", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		return e.gc.RunStatus()[0].Success && len(ps) == 1 && ps[0].ID == ids[0]
	})
}

// TestNotBackedUpListsVMsWithoutARecentSuccessfulBackup: where backups are in use, VMs without a
// successful backup within the lookback are listed (never backed up, or only long ago), not as
// failures; templates, VMs tagged no-backup, VMs backed up recently and those whose newest
// backup failed (listed as such) are not; where no VM has a backup, none is listed.
func TestNotBackedUpListsVMsWithoutARecentSuccessfulBackup(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	doms := []veil.Domain{
		{ID: "recent", VerboseName: "vm-recent"},
		{ID: "never", VerboseName: "vm-never"},
		{ID: "old", VerboseName: "vm-old"},
		{ID: "failed", VerboseName: "vm-failed"},
		{ID: "tpl", VerboseName: "tpl", Template: true},
		{ID: "skip", VerboseName: "vm-skip", Tags: []veil.Tag{{Name: "lab"}, {Name: NoBackupTag}}},
		{ID: "almost", VerboseName: "vm-almost", Tags: []veil.Tag{{Name: "no-backups"}}},
		{ID: "noname"},
	}
	backups := []domainBackup{
		{"recent", lastBackup{success: now.Add(-time.Hour), finished: now.Add(-time.Hour), succeeded: true}},
		{"old", lastBackup{success: now.Add(-week - time.Minute), finished: now.Add(-week - time.Minute), succeeded: true}},
		{"failed", lastBackup{finished: now.Add(-time.Hour)}},
	}
	tests := []struct {
		name     string
		backups  []domainBackup
		lookback time.Duration
		want     []string // ids
		state    string
	}{
		{"backups in use", backups, week, []string{"never", "old", "almost", "noname"}, "no successful backup within 7d"},
		{"no lookback: any success since the start counts", backups, 0, []string{"never", "almost", "noname"}, "no successful backup since the exporter started"},
		{"a lookback that is not whole days", backups, 36 * time.Hour, []string{"never", "old", "almost", "noname"}, "no successful backup within 1d12h"},
		{"no backups in use", nil, week, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := notBackedUp(doms, tt.backups, tt.lookback, now)
			var ids []string
			for _, p := range got {
				ids = append(ids, p.ID)
				if p.Kind != "backup" || p.Failure || p.State != tt.state {
					t.Errorf("%+v: want kind backup, not a failure, state %q", p, tt.state)
				}
				if p.Name == "" {
					t.Errorf("%s has no name", p.ID)
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("listed %v, want %v", ids, tt.want)
			}
		})
	}
}

// TestInventoryProblemsListVMsNotBackedUp: against the simulator, nothing is listed while no VM
// has a backup; after one VM's backup succeeds the other VMs (not templates, not the one tagged
// no-backup) are listed by name after the failures.
func TestInventoryProblemsListVMsNotBackedUp(t *testing.T) {
	f := newFixture(t, veiltest.Options{Nodes: 2, VMs: 5, Templates: 1, Seed: 5, InitialTasks: -1, TaskDuration: 10 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	for _, p := range f.inv.Problems() {
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
	if err := f.sim.SetTags(vms[1], "lab", NoBackupTag); err != nil {
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
	ps := f.inv.Problems()
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
