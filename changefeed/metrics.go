// The writer's metrics and status.

package changefeed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

var (
	descWrites    = prometheus.NewDesc("veil_inventory_kv_writes_total", "Changes of the controller's objects written to the inventory bucket, by change (created, updated, deleted).", []string{"controller", "change"}, nil)
	descErrors    = prometheus.NewDesc("veil_inventory_kv_errors_total", "Failed attempts to read or write the inventory bucket (retried; the changes wait).", []string{"controller"}, nil)
	descConflicts = prometheus.NewDesc("veil_inventory_kv_conflicts_total", "Writes the bucket refused because a key changed since this writer read it (another replica wrote); the bucket is then read back.", []string{"controller"}, nil)
	descDropped   = prometheus.NewDesc("veil_inventory_kv_dropped_total", "Pushed changes dropped while NATS was away too long (over 100,000 queued); a full listing writes the result instead.", []string{"controller"}, nil)
	descPending   = prometheus.NewDesc("veil_inventory_kv_pending", "Listings and pushed changes waiting to be written.", []string{"controller"}, nil)
	descKeys      = prometheus.NewDesc("veil_inventory_kv_keys", "Objects of the controller the bucket holds, as this writer last saw it.", []string{"controller"}, nil)
	descLastWrite = prometheus.NewDesc("veil_inventory_kv_last_write_timestamp_seconds", "When a change was last written (0: none since start).", []string{"controller"}, nil)
)

// Describe implements prometheus.Collector.
func (w *Writer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWrites, descErrors, descConflicts, descDropped, descPending, descKeys, descLastWrite} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (w *Writer) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.opts.Controller
	for _, change := range []string{Created, Updated, Deleted} {
		ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, w.stats.writes[change], c, change)
	}
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, w.stats.errors, c)
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.CounterValue, w.stats.conflicts, c)
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, w.stats.dropped, c)
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(len(w.jobs)), c)
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(w.stats.keys), c)
	ch <- prometheus.MustNewConstMetric(descLastWrite, prometheus.GaugeValue, metricutil.UnixSeconds(w.stats.lastWrite), c)
}

// Status is what the status page shows of the writer.
type Status struct {
	Bucket    string
	Loaded    bool // the bucket was read back at least once
	Keys      int
	Pending   int
	Writes    float64
	LastWrite time.Time
	LastError string
}

// Status returns the writer's state.
func (w *Writer) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n float64
	for _, v := range w.stats.writes {
		n += v
	}
	failing, _, _ := w.outage.Failing()
	st := Status{Bucket: w.opts.Config.Bucket, Loaded: w.stats.loaded, Keys: w.stats.keys, Pending: len(w.jobs), Writes: n, LastWrite: w.stats.lastWrite}
	if failing > 0 {
		st.LastError = w.stats.lastErr
	}
	return st
}

// RunStatus reports the writer as the collector "inventory_kv": failing while it cannot read or
// write the bucket.
func (w *Writer) RunStatus() []runstatus.Status {
	failing, _, err := w.outage.Failing()
	w.mu.Lock()
	defer w.mu.Unlock()
	st := runstatus.Status{Collector: "inventory_kv", Success: w.stats.loaded && failing == 0, LastSuccess: w.stats.lastWrite}
	if failing > 0 {
		st.Error = err
	}
	return []runstatus.Status{st}
}
