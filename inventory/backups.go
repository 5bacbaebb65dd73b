package inventory

// This file keeps the last backup of each VM, learnt from the task journal: the backup tasks
// (collect.backup_task_pattern on the task name) the task collection sees finish, and at start
// those of the last collect.backup_lookback, so a restart forgets nothing.

import (
	"regexp"
	"sync"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// backupTracker is safe for concurrent use; its state is replaced only by the task collection.
type backupTracker struct {
	pattern  *regexp.Regexp // nil: backups are not followed
	lookback time.Duration

	mu      sync.Mutex
	last    map[string]*LastBackup // by domain id
	changed bool                   // since the last frozen
}

// LastBackup is what the journal says of one VM's backups.
type LastBackup struct {
	Success    time.Time // finish of the newest successful backup; zero if none seen
	Finished   time.Time // finish of the newest finished backup
	Succeeded  bool      // that newest finished backup succeeded
	observedAt time.Time // when a task last told about this VM, to forget deleted VMs
}

func newBackupTracker(pattern *regexp.Regexp, lookback time.Duration) *backupTracker {
	return &backupTracker{pattern: pattern, lookback: lookback, last: map[string]*LastBackup{}}
}

// frozen returns a copy of the last backups for a snapshot, or prev when nothing changed
// since prev was made (made false).
func (b *backupTracker) frozen(prev map[string]LastBackup) (m map[string]LastBackup, made bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.changed && prev != nil {
		return prev, false
	}
	b.changed = false
	out := make(map[string]LastBackup, len(b.last))
	for id, lb := range b.last {
		out[id] = *lb
	}
	return out, true
}

// taskFinish is when a task ended: finished_time, else created plus executed.
func taskFinish(t *veil.Task) time.Time {
	if !t.FinishedTime.IsZero() {
		return t.FinishedTime.Time
	}
	return t.Created.Add(time.Duration(float64(t.Executed) * float64(time.Second)))
}

// observe takes finished tasks; backups of a VM (a "domain" entity) newer than what is known
// replace it. Tasks older than the lookback are ignored, so the first scan's last page, read
// past the lookback, does not add older backups by chance.
func (b *backupTracker) observe(now time.Time, tasks []pendingTask) {
	if b.pattern == nil {
		return
	}
	cutoff := now.Add(-b.lookback)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range tasks {
		t := &tasks[i].Task
		if !t.Final() || !b.pattern.MatchString(t.Name) || t.Created.Before(cutoff) {
			continue
		}
		end := taskFinish(t)
		ok := t.Status == veil.TaskSuccess
		for _, e := range parseEntities(t.Entities) {
			if e.class != "domain" {
				continue
			}
			lb := b.last[e.id]
			if lb == nil {
				lb = &LastBackup{}
				b.last[e.id] = lb
			}
			lb.observedAt = now
			if ok && end.After(lb.Success) {
				lb.Success = end
			}
			if !end.Before(lb.Finished) {
				lb.Finished, lb.Succeeded = end, ok
			}
			b.changed = true
		}
	}
}

// forget drops VMs that are not in the inventory any more (present: every domain id of a
// successful read) and were not told about by a task since before that read began.
func (b *backupTracker) forget(present map[string]bool, readStart time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, lb := range b.last {
		if !present[id] && lb.observedAt.Before(readStart) {
			delete(b.last, id)
			b.changed = true
		}
	}
}
