package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// journalBackups reads the whole task journal of the simulator and works out, as the HELP
// defines them, each VM's last backup: finish of the newest success and whether the newest
// finished backup succeeded.
func journalBackups(t *testing.T, sim *veiltest.Server, pattern string, cutoff time.Time) map[string]inventory.LastBackup {
	t.Helper()
	c, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := c.Tasks(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(pattern)
	out := map[string]inventory.LastBackup{}
	for i := range tasks {
		tk := &tasks[i]
		if !tk.Final() || !re.MatchString(tk.Name) || tk.Created.Before(cutoff) {
			continue
		}
		var ents map[string]string
		if err := json.Unmarshal(tk.Entities, &ents); err != nil {
			t.Fatal(err)
		}
		for id, class := range ents {
			if class != "domain" {
				continue
			}
			lb := out[id]
			end := taskFinish(tk)
			if tk.Status == veil.TaskSuccess && end.After(lb.Success) {
				lb.Success = end
			}
			if !end.Before(lb.Finished) {
				lb.Finished, lb.Succeeded = end, tk.Status == veil.TaskSuccess
			}
			out[id] = lb
		}
	}
	return out
}

// taskFinish is when a task ended: finished_time, else created plus executed.
func taskFinish(t *veil.Task) time.Time {
	if !t.FinishedTime.IsZero() {
		return t.FinishedTime.Time
	}
	return t.Created.Add(time.Duration(float64(t.Executed) * float64(time.Second)))
}

// taskPageSize is the page of the store's scans of the task journal.
const taskPageSize = 100

func seconds(ts time.Time) string {
	return strconv.FormatFloat(metricutil.UnixSeconds(ts), 'g', -1, 64)
}

// checkBackups compares the backup series with the journal.
func checkBackups(t *testing.T, f *fixture, want map[string]inventory.LastBackup) {
	t.Helper()
	got := series(t, f.inv, "veil_domain_last_backup_success")
	n := 0
	for _, d := range f.inv.Domains() {
		lb, ok := want[d.ID]
		if !ok {
			continue
		}
		n++
		if v := value(t, f.inv, "veil_domain_last_backup_success", d.ID); v != fmt.Sprint(metricutil.Bool(lb.Succeeded)) {
			t.Errorf("%s: last backup success %s, want %v", d.ID, v, lb.Succeeded)
		}
		ts := series(t, f.inv, "veil_domain_last_backup_timestamp_seconds", d.ID)
		switch {
		case lb.Success.IsZero() && len(ts) != 0:
			t.Errorf("%s: timestamp %q without a successful backup", d.ID, ts)
		case !lb.Success.IsZero() && (len(ts) != 1 || !strings.HasSuffix(ts[0], " "+seconds(lb.Success))):
			t.Errorf("%s: timestamp %q, want %s", d.ID, ts, seconds(lb.Success))
		}
	}
	if len(got) != n {
		t.Errorf("%d backup series, want %d (VMs in the inventory with a backup): %q", len(got), n, got)
	}
}

// TestLastBackupsFromTheJournal: the first refresh reads the journal's past backups, later
// refreshes follow backups as they finish, and a deleted VM's series vanish.
func TestLastBackupsFromTheJournal(t *testing.T) {
	cc := testCollect()
	// At most 24 seeded tasks, 5 min apart at most, all lie before the simulator's now.
	f := newFixture(t, veiltest.Options{Seed: 12, VMs: 4, InitialTasks: 24, TaskDuration: 20 * time.Millisecond}, cc, veil.Config{})
	f.mustRefresh(t)
	want := journalBackups(t, f.sim, cc.BackupTaskPattern.String(), time.Now().Add(-time.Duration(cc.BackupLookback)))
	if len(want) < 2 {
		t.Fatalf("the seeded journal has backups of %d VMs: the test proves little", len(want))
	}
	checkBackups(t, f, want)

	// A backup run now, on a VM: followed by the task collection.
	c, err := veilops.New(f.sim.URL, f.sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vm := f.sim.DomainIDs()[0]
	env, err := c.BackupDomain(ctx, vm, "", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitTask(ctx, env.Task.ID, 10*time.Millisecond, nil)
	if err != nil || done.Status != veil.TaskSuccess {
		t.Fatalf("backup task %+v: %v", done, err)
	}
	f.mustRefresh(t)
	if v := value(t, f.inv, "veil_domain_last_backup_timestamp_seconds", vm); v != seconds(taskFinish(done)) {
		t.Errorf("after a backup finished: timestamp %s, want %s", v, seconds(taskFinish(done)))
	}
	if v := value(t, f.inv, "veil_domain_last_backup_success", vm); v != "1" {
		t.Errorf("after a backup succeeded: success %s", v)
	}

	if err := f.sim.DeleteVM(vm); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	if s := series(t, f.inv, "backup", vm); len(s) != 0 {
		t.Errorf("deleted VM keeps backup series: %q", s)
	}
}

// TestBackupLookbackStopsPaging: the first scan reads newest first and stops at the first
// page holding a task older than collect.backup_lookback; a later scan reads one page.
func TestBackupLookbackStopsPaging(t *testing.T) {
	cc := testCollect()
	cc.BackupLookback = model.Duration(3 * time.Hour)
	// The journal starts 12 h ago (the simulator seeds from its clock minus 2 h) and grows by
	// up to 5 min a task: older tasks than the lookback lie on the last pages.
	past := time.Now().Add(-10 * time.Hour)
	start := time.Now()
	opts := veiltest.Options{Seed: 13, VMs: 6, InitialTasks: 600, Now: func() time.Time { return past.Add(time.Since(start)) }}
	f := newFixture(t, opts, cc, veil.Config{})
	cutoff := time.Now().Add(-3 * time.Hour)
	c, err := veil.New(veil.Config{URL: f.sim.URL, Token: f.sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Tasks(context.Background(), url.Values{"ordering": {"-created"}})
	if err != nil {
		t.Fatal(err)
	}
	first := -1 // index of the newest task older than the cutoff
	for i := range all {
		if all[i].Created.Before(cutoff) {
			first = i
			break
		}
	}
	if first < taskPageSize || first >= len(all)-taskPageSize {
		t.Fatalf("the first task older than the lookback is at %d of %d: not a paging test", first, len(all))
	}
	wantPages := first/taskPageSize + 1
	f.sim.ResetRequests()
	f.mustRefresh(t)
	if got := scanPages(f.sim); got != wantPages {
		t.Errorf("first scan read %d pages, want %d (stop at the page holding task %d)", got, wantPages, first)
	}
	checkBackups(t, f, journalBackups(t, f.sim, cc.BackupTaskPattern.String(), cutoff))
	f.sim.ResetRequests()
	f.mustRefresh(t)
	if got := scanPages(f.sim); got != 1 {
		t.Errorf("a later scan read %d pages, want 1", got)
	}
}

// scanPages counts the journal pages read newest first.
func scanPages(sim *veiltest.Server) int {
	n := 0
	for _, r := range sim.Requests() {
		if r.Path == "/api/tasks/" && strings.Contains(r.Query, "ordering=-created") {
			n++
		}
	}
	return n
}

// TestNoBackupsWithoutTasks: a controller without /api/tasks/ has no backup series and is up.
func TestNoBackupsWithoutTasks(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 12, VMs: 6, InitialTasks: 80}, testCollect(), veil.Config{})
	f.sim.SetFaults(veiltest.Fault{Path: "/api/tasks/", Kind: "status", Status: 404})
	f.mustRefresh(t)
	if v := value(t, f.inv, "veil_up"); v != "1" {
		t.Errorf("veil_up = %s", v)
	}
	if s := series(t, f.inv, "backup"); len(s) != 0 {
		t.Errorf("backup series without a task journal: %q", s)
	}
	if len(series(t, f.inv, "veil_domain_info")) != 6 {
		t.Error("domains not served")
	}
}
