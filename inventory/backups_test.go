package inventory

import (
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestBackupTrackerKeepsTheNewest: finished backups in any order give the newest success and
// the newest outcome; other tasks, running ones and those before the lookback are ignored.
func TestBackupTrackerKeepsTheNewest(t *testing.T) {
	now := time.Now()
	bt := newBackupTracker(regexp.MustCompile(`(?i)backup|резерв`), 24*time.Hour)
	task := func(name, status string, ago time.Duration, ents string) pendingTask {
		created := now.Add(-ago)
		return pendingTask{Task: veil.Task{Name: name, Status: status, Created: veil.Time{Time: created},
			FinishedTime: veil.Time{Time: created.Add(time.Minute)}, Entities: json.RawMessage(ents)}}
	}
	bt.observe(now, []pendingTask{
		task("Backup of the virtual machine a.", veil.TaskSuccess, 5*time.Hour, `{"A":"domain"}`),
		task("Backup of the virtual machine a.", veil.TaskFailed, 2*time.Hour, `{"A":"domain"}`),
		task("Backup of the virtual machine a.", veil.TaskSuccess, 8*time.Hour, `{"A":"domain"}`),
		task("Резервное копирование ВМ b.", veil.TaskSuccess, 1*time.Hour, `{"B":"domain","P":"datapool"}`),
		task("Backup of the virtual machine b.", veil.TaskInProgress, 10*time.Minute, `{"B":"domain"}`),
		task("Starting the virtual machine c.", veil.TaskSuccess, time.Hour, `{"C":"domain"}`),
		task("Backup of the virtual machine d.", veil.TaskSuccess, 30*time.Hour, `{"D":"domain"}`),
		task("Backup of the virtual machine e.", veil.TaskFailed, time.Hour, `{"E":"domain"}`),
	})
	got, _ := bt.frozen(nil)
	fin := func(ago time.Duration) time.Time { return now.Add(-ago).Add(time.Minute) }
	want := map[string]struct {
		success   time.Time
		succeeded bool
	}{
		"A": {fin(5 * time.Hour), false},
		"B": {fin(time.Hour), true},
		"E": {time.Time{}, false},
	}
	if len(got) != len(want) {
		t.Errorf("backups of %d VMs, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		if g := got[id]; !g.Success.Equal(w.success) || g.Succeeded != w.succeeded {
			t.Errorf("%s: success %v succeeded %v, want %v %v", id, g.Success, g.Succeeded, w.success, w.succeeded)
		}
	}
	if again, _ := bt.frozen(got); reflect.ValueOf(again).UnsafePointer() != reflect.ValueOf(got).UnsafePointer() {
		t.Error("the backups were copied again without a change")
	}
	bt.forget(map[string]bool{"A": true}, now.Add(time.Second))
	if left, _ := bt.frozen(got); len(left) != 1 || len(got) != len(want) {
		t.Errorf("after forgetting deleted VMs %d remain (want 1); the older copy holds %d (want %d)", len(left), len(got), len(want))
	}
}
