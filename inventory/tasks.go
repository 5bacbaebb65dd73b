package inventory

// The task journal: tasks counted by status at each refresh, and the tasks seen finishing,
// each told once, under its kind, to the store's TaskObserver.

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

const (
	// maxTaskKinds bounds the kind label of the task families; further kinds become "other".
	maxTaskKinds = 100
	// maxTaskPages bounds one scan of the task journal (100 tasks a page): a task that runs for
	// longer than this many newer tasks take to appear is given up.
	maxTaskPages = 50
	// maxLookbackPages bounds the first scan, which reads collect.backup_lookback back for the
	// last backups: 10,000 tasks, even if the controller ignores the ordering.
	maxLookbackPages = 100
	// maxPendingTasks bounds the finished tasks kept for a refresh that failed after its scan.
	maxPendingTasks = 10000
	taskPageSize    = 100
	otherKind       = "other"
)

// TaskStatuses are the statuses counted in Snapshot.TaskCounts; a fixed list keeps the label
// bounded.
var TaskStatuses = []string{veil.TaskInProgress, veil.TaskSuccess, veil.TaskFailed, veil.TaskCanceled, veil.TaskLost, veil.TaskPartial}

// taskTracker counts tasks seen finishing. It scans the journal newest first down to a
// watermark on `created`: the creation time of the oldest task still running at the last
// scan, or else of the newest task. Ids counted at or after the watermark are remembered, so
// no task is counted twice, and a task that was running when seen is counted when it ends.
type taskTracker struct {
	maxKinds int
	lookback time.Duration // how far back the first scan reads; 0: one page

	mu        sync.Mutex
	primed    bool // the first scan only marks history as seen
	watermark time.Time
	counted   map[string]time.Time // id -> created, for tasks at or after the watermark
	pending   []pendingTask        // seen finished, not yet handed to a successful refresh
	kinds     map[string]bool
	templates []kindTemplate // kinds with placeholders, the most fixed text first
	observer  TaskObserver   // nil: none
}

// FinishedTask is a task seen finishing, as a TaskObserver is told it.
type FinishedTask struct {
	// Kind is the task name with each object's name replaced by its class ("Starting the
	// virtual machine {domain}."), at most maxTaskKinds of them, then "other".
	Kind   string
	Status string
	// Seconds is its execution time, never negative.
	Seconds float64
}

// A TaskObserver is told each task seen finishing since the exporter started, once, in the
// order they are read. It is called with the store's lock held: it must only take note.
type TaskObserver func(FinishedTask)

// pendingTask is a task seen finished for the first time; history marks the first scan's,
// which finished before the exporter started and are not counted.
type pendingTask struct {
	veil.Task
	history bool
}

// newTaskTracker follows the tasks finishing.
func newTaskTracker(maxKinds int, lookback time.Duration) *taskTracker {
	return &taskTracker{
		maxKinds: maxKinds,
		lookback: lookback,
		counted:  map[string]time.Time{},
		kinds:    map[string]bool{},
	}
}

// taskRead is one refresh of the task collection.
type taskRead struct {
	counts map[string]float64 // by status
	fresh  []pendingTask      // tasks seen finished for the first time
}

// refresh counts tasks per status and scans for newly finished tasks.
func (t *taskTracker) refresh(ctx context.Context, c *veil.Client) (taskRead, error) {
	type res struct {
		status string
		count  int
		err    error
	}
	ch := make(chan res, len(TaskStatuses))
	for _, s := range TaskStatuses {
		go func() {
			p, err := veil.ListPage[veil.Task](ctx, c, veil.PageRequest{Path: "/api/tasks/", Limit: 1, Query: url.Values{"status": {s}}})
			ch <- res{s, p.Count, err}
		}()
	}
	scanErr := t.scan(ctx, c)
	counts := make(map[string]float64, len(TaskStatuses))
	var firstErr error
	for range TaskStatuses {
		r := <-ch
		if r.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("couldn't count %s tasks: %w", r.status, r.err)
		}
		counts[r.status] = float64(r.count)
	}
	if scanErr != nil {
		return taskRead{}, scanErr
	}
	if firstErr != nil {
		return taskRead{}, firstErr
	}
	t.mu.Lock()
	fresh := t.pending
	t.pending = nil
	t.mu.Unlock()
	return taskRead{counts: counts, fresh: fresh}, nil
}

// scan reads the journal newest first down to the watermark and keeps the tasks seen
// finished for the first time in t.pending, until a refresh succeeds. On an error nothing is
// kept and the watermark stays, so the next scan sees the same tasks. The first scan reads
// back t.lookback (bounded) so that the last backups before the start are known; its tasks
// are history, not counted.
func (t *taskTracker) scan(ctx context.Context, c *veil.Client) error {
	t.mu.Lock()
	primed, watermark := t.primed, t.watermark
	t.mu.Unlock()

	pages := maxTaskPages
	var cutoff time.Time // the first scan stops at a page older than this
	if !primed {
		pages = 1
		if t.lookback > 0 {
			pages, cutoff = maxLookbackPages, time.Now().Add(-t.lookback)
		}
	}
	q := url.Values{"ordering": {"-created"}}
	var seen []veil.Task
	reached := false
	for p := 0; p < pages && !reached; p++ {
		page, err := veil.ListPage[veil.Task](ctx, c, veil.PageRequest{Path: "/api/tasks/", Offset: p * taskPageSize, Limit: taskPageSize, Query: q})
		if err != nil {
			return fmt.Errorf("couldn't read tasks: %w", err)
		}
		var oldest time.Time
		for _, task := range page.Results {
			if !watermark.IsZero() && task.Created.Before(watermark) {
				reached = true
				break
			}
			if oldest.IsZero() || task.Created.Before(oldest) {
				oldest = task.Created.Time
			}
			seen = append(seen, task)
		}
		if !cutoff.IsZero() && oldest.Before(cutoff) {
			break
		}
		if len(page.Results) == 0 || (p+1)*taskPageSize >= page.Count {
			break
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	var oldestRunning, newest time.Time
	for i := range seen {
		task := &seen[i]
		if task.Created.After(newest) {
			newest = task.Created.Time
		}
		if !task.Final() {
			if oldestRunning.IsZero() || task.Created.Before(oldestRunning) {
				oldestRunning = task.Created.Time
			}
			continue
		}
		if _, ok := t.counted[task.ID]; ok {
			continue
		}
		t.counted[task.ID] = task.Created.Time
		if len(t.pending) < maxPendingTasks {
			t.pending = append(t.pending, pendingTask{*task, !primed})
		}
	}
	switch {
	case !oldestRunning.IsZero():
		t.watermark = oldestRunning
	case !newest.IsZero():
		t.watermark = newest
	}
	for id, created := range t.counted {
		if created.Before(t.watermark) {
			delete(t.counted, id)
		}
	}
	t.primed = true
	return nil
}

// record tells the observer of the tasks seen finishing, under their kind (history excepted);
// names gives the inventory's names.
func (t *taskTracker) record(tasks []pendingTask, names func(id string) (string, bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range tasks {
		if !tasks[i].history {
			t.count(&tasks[i].Task, names)
		}
	}
}

// count tells the observer of one finished task; t.mu is held.
func (t *taskTracker) count(task *veil.Task, names func(id string) (string, bool)) {
	name, ok := taskKind(task.Name, parseEntities(task.Entities), names, t.templates)
	switch {
	case !ok:
		name = otherKind
	case !t.kinds[name] && len(t.kinds) >= t.maxKinds:
		name = otherKind
	case !t.kinds[name]:
		t.kinds[name] = true
		if tmpl, ok := newKindTemplate(name); ok {
			// Most fixed text first: the most specific template wins.
			i := sort.Search(len(t.templates), func(i int) bool { return t.templates[i].fixed < tmpl.fixed })
			t.templates = slices.Insert(t.templates, i, tmpl)
		}
	}
	secs := float64(task.Executed)
	if secs <= 0 && !task.FinishedTime.IsZero() {
		secs = task.FinishedTime.Sub(task.Created.Time).Seconds()
	}
	if secs < 0 || math.IsNaN(secs) {
		secs = 0 // the platform's clocks disagreed: not a negative duration
	}
	if t.observer != nil {
		t.observer(FinishedTask{Kind: name, Status: task.Status, Seconds: secs})
	}
}
