package inventory

import (
	"slices"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

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
	backups := []DomainBackup{
		{"recent", LastBackup{Success: now.Add(-time.Hour), Finished: now.Add(-time.Hour), Succeeded: true}},
		{"old", LastBackup{Success: now.Add(-week - time.Minute), Finished: now.Add(-week - time.Minute), Succeeded: true}},
		{"failed", LastBackup{Finished: now.Add(-time.Hour)}},
	}
	tests := []struct {
		name     string
		backups  []DomainBackup
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
			got := notBackedUp(NewVMs(refs(doms)), tt.backups, tt.lookback, now)
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
