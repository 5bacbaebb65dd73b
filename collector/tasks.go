package collector

// The task families: veil_tasks_finished_total and veil_task_duration_seconds, counted from
// the tasks the store sees finishing (inventory.TaskObserver).

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/inventory"
)

// taskDurationBuckets cover platform operations from a snapshot (seconds) to a backup (hours).
var taskDurationBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}

// taskMetrics counts the tasks seen finishing, by kind and status, and their durations by kind.
type taskMetrics struct {
	finishedDesc *prometheus.Desc
	durations    *prometheus.HistogramVec // by kind

	mu       sync.Mutex
	finished map[[2]string]*finishedCount // {kind, status}
}

type finishedCount struct {
	name, status string
	n            float64
	created      time.Time
}

func newTaskMetrics(controller string) *taskMetrics {
	cl := prometheus.Labels{"controller": controller}
	return &taskMetrics{
		finishedDesc: prometheus.NewDesc("veil_tasks_finished_total",
			"Tasks seen finishing since the exporter started, by kind (the task name with each object's name replaced by its class, e.g. 'Starting the virtual machine {domain}.'; at most 100 kinds, then other) and final status; counted at each inventory refresh, every collect.interval.",
			[]string{"kind", "status"}, cl),
		durations: taskDurations(controller),
		finished:  map[[2]string]*finishedCount{},
	}
}

// taskDurations is veil_task_duration_seconds of one controller: classic and native buckets
// (coarsened past nativeMaxBuckets, never reset: it counts since the exporter started).
func taskDurations(controller string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "veil_task_duration_seconds",
		Help:        "Execution time of tasks seen finishing since the exporter started, by kind (as in veil_tasks_finished_total); counted at each inventory refresh, every collect.interval.",
		ConstLabels: prometheus.Labels{"controller": controller},
		Buckets:     taskDurationBuckets,
		// Native buckets beside the classic ones: a protobuf scrape gets both.
		NativeHistogramBucketFactor:    nativeBucketFactor,
		NativeHistogramMaxBucketNumber: nativeMaxBuckets,
	}, []string{"kind"})
}

// observe counts one task seen finishing (an inventory.TaskObserver).
func (t *taskMetrics) observe(f inventory.FinishedTask) {
	t.mu.Lock()
	k := [2]string{f.Kind, f.Status}
	fc := t.finished[k]
	if fc == nil {
		// Counted from here on: the counter's start, which protobuf scrapes carry.
		fc = &finishedCount{name: f.Kind, status: f.Status, created: time.Now()}
		t.finished[k] = fc
	}
	fc.n++
	t.mu.Unlock()
	t.durations.WithLabelValues(f.Kind).Observe(f.Seconds)
}

// values copies the counters for a scrape.
func (t *taskMetrics) values() []finishedCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	fc := make([]finishedCount, 0, len(t.finished))
	for _, f := range t.finished {
		fc = append(fc, *f)
	}
	return fc
}

func (t *taskMetrics) describe(ch chan<- *prometheus.Desc) {
	ch <- t.finishedDesc
	t.durations.Describe(ch)
}

func (t *taskMetrics) collect(ch chan<- prometheus.Metric) {
	for _, f := range t.values() {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(t.finishedDesc, prometheus.CounterValue, f.n, f.created, f.name, f.status)
	}
	t.durations.Collect(ch)
}
