package collector

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

const (
	// maxTaskNames bounds the name label of the task families; further names become "other".
	maxTaskNames = 100
	// maxTaskPages bounds one scan of the task journal (100 tasks a page): a task that runs for
	// longer than this many newer tasks take to appear is given up.
	maxTaskPages = 50
	otherName    = "other"
)

// taskStatuses are the statuses counted in veil_tasks; a fixed list keeps the label bounded.
var taskStatuses = []string{veil.TaskInProgress, veil.TaskSuccess, veil.TaskFailed, veil.TaskCanceled, veil.TaskLost, veil.TaskPartial}

// taskDurationBuckets cover platform operations from a snapshot (seconds) to a backup (hours).
var taskDurationBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}

// taskTracker counts tasks seen finishing. It scans the journal newest first down to a
// watermark on `created`: the creation time of the oldest task still running at the last
// scan, or else of the newest task. Ids counted at or after the watermark are remembered, so
// no task is counted twice, and a task that was running when seen is counted when it ends.
type taskTracker struct {
	maxNames int

	mu        sync.Mutex
	primed    bool // the first scan only marks history as seen
	watermark time.Time
	counted   map[string]time.Time // id -> created, for tasks at or after the watermark
	names     map[string]bool
	finished  map[[2]string]float64 // {name, status}
	durations map[string]*taskHistogram
}

type taskHistogram struct {
	count   uint64
	sum     float64
	buckets []uint64 // cumulative is computed at scrape time
}

func newTaskTracker(maxNames int) *taskTracker {
	return &taskTracker{
		maxNames:  maxNames,
		counted:   map[string]time.Time{},
		names:     map[string]bool{},
		finished:  map[[2]string]float64{},
		durations: map[string]*taskHistogram{},
	}
}

// refresh counts tasks per status and scans for newly finished tasks.
func (t *taskTracker) refresh(ctx context.Context, c *veil.Client) (map[string]float64, error) {
	type res struct {
		status string
		count  int
		err    error
	}
	ch := make(chan res, len(taskStatuses))
	for _, s := range taskStatuses {
		go func() {
			p, err := veil.ListPage[veil.Task](ctx, c, "/api/tasks/", 0, 1, url.Values{"status": {s}})
			ch <- res{s, p.Count, err}
		}()
	}
	scanErr := t.scan(ctx, c)
	counts := make(map[string]float64, len(taskStatuses))
	var firstErr error
	for range taskStatuses {
		r := <-ch
		if r.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("couldn't count %s tasks: %w", r.status, r.err)
		}
		counts[r.status] = float64(r.count)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if scanErr != nil {
		return nil, scanErr
	}
	return counts, nil
}

// scan reads the journal newest first down to the watermark and counts finished tasks. On an
// error nothing is counted and the watermark stays, so the next scan sees the same tasks.
func (t *taskTracker) scan(ctx context.Context, c *veil.Client) error {
	t.mu.Lock()
	primed, watermark := t.primed, t.watermark
	t.mu.Unlock()

	pages := maxTaskPages
	if !primed {
		pages = 1 // history before the start is not counted: the newest page sets the watermark
	}
	q := url.Values{"ordering": {"-created"}}
	var seen []veil.Task
	reached := false
	for p := 0; p < pages && !reached; p++ {
		page, err := veil.ListPage[veil.Task](ctx, c, "/api/tasks/", p*100, 100, q)
		if err != nil {
			return fmt.Errorf("couldn't read tasks: %w", err)
		}
		for _, task := range page.Results {
			if !watermark.IsZero() && task.Created.Before(watermark) {
				reached = true
				break
			}
			seen = append(seen, task)
		}
		if len(page.Results) == 0 || (p+1)*100 >= page.Count {
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
		if primed {
			t.count(task)
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

// count records one finished task; t.mu is held.
func (t *taskTracker) count(task *veil.Task) {
	name := task.Name
	if name == "" {
		name = "unknown"
	}
	if !t.names[name] {
		if len(t.names) >= t.maxNames {
			name = otherName
		} else {
			t.names[name] = true
		}
	}
	t.finished[[2]string{name, task.Status}]++
	secs := float64(task.Executed)
	if secs <= 0 && !task.FinishedTime.IsZero() {
		secs = task.FinishedTime.Sub(task.Created.Time).Seconds()
	}
	h := t.durations[name]
	if h == nil {
		h = &taskHistogram{buckets: make([]uint64, len(taskDurationBuckets))}
		t.durations[name] = h
	}
	h.count++
	h.sum += secs
	for i, ub := range taskDurationBuckets {
		if secs <= ub {
			h.buckets[i]++
			break
		}
	}
}

type finishedCount struct {
	name, status string
	n            float64
}

type durationHist struct {
	name    string
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// values copies the counters for a scrape.
func (t *taskTracker) values() ([]finishedCount, []durationHist) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fc := make([]finishedCount, 0, len(t.finished))
	for k, n := range t.finished {
		fc = append(fc, finishedCount{k[0], k[1], n})
	}
	dh := make([]durationHist, 0, len(t.durations))
	for name, h := range t.durations {
		b := make(map[float64]uint64, len(taskDurationBuckets))
		var cum uint64
		for i, ub := range taskDurationBuckets {
			cum += h.buckets[i]
			b[ub] = cum
		}
		dh = append(dh, durationHist{name, h.count, h.sum, b})
	}
	return fc, dh
}
