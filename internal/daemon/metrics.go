// The daemon's metrics: each running controller's, delegated (the rendered series as Sets for
// text, OpenMetrics and protobuf scrapes, which webSource.RenderedSets lists, and encoded live
// for name[] filters), and the veil_collector_* families of every controller, emitted in one
// place from the run status each component reports (as node_exporter's collector.go does for
// its collectors).

package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

// exported lists the controllers whose series a scrape shows, in configuration order: all that
// run, but with replicas only while their lease is valid. A released controller stays in
// d.controllers until its loops have stopped (its forwarder saves its position under the lease
// still held), and in that time veil_ha_leader already says 0 for it; its series go with it.
// One scrape reads the rendered sets before the coordinator's gauge, so a lease that ends
// between the two (microseconds) shows once with both.
func (d *Daemon) exported() []*controller {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return exported(d.controllers)
}

func exported(ctrls []*controller) []*controller {
	out := ctrls[:0:0]
	for _, ct := range ctrls {
		if l := ct.lease.Load(); l == nil || l.Valid() {
			out = append(out, ct)
		}
	}
	return out
}

// renderedCollector encodes live what renderedSets hold, for name[] filters and the protobuf
// text forms.
type renderedCollector struct{ d *Daemon }

func (renderedCollector) Describe(chan<- *prometheus.Desc) {}
func (c renderedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ct := range c.d.exported() {
		for _, p := range ct.parts.rendered {
			p.collectRendered(ch)
		}
	}
}

// controllersCollector delegates the live families to whatever controllers run now; it
// describes nothing (unchecked) because the set changes on reload.
type controllersCollector struct{ d *Daemon }

func (controllersCollector) Describe(chan<- *prometheus.Desc) {}
func (c controllersCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ct := range c.d.exported() {
		ct.api.Collect(ch)
		for _, p := range ct.parts.all {
			p.collectLive(ch)
		}
	}
}

// controllerRuns is one controller's components that report their runs.
type controllerRuns struct {
	controller string
	reporters  []runstatus.Reporter
}

// reporters lists the components of ct, each of which reports its runs.
func reporters(ct *controller) []runstatus.Reporter {
	out := make([]runstatus.Reporter, len(ct.parts.all))
	for i, p := range ct.parts.all {
		out[i] = p
	}
	return out
}

// runs snapshots what reports the runs of the controllers running now.
func (d *Daemon) runs() []controllerRuns {
	ctrls := d.exported()
	out := make([]controllerRuns, 0, len(ctrls))
	for _, ct := range ctrls {
		out = append(out, controllerRuns{controller: ct.cfg.Name, reporters: reporters(ct)})
	}
	return out
}

// runStatusCollector emits veil_collector_success, veil_collector_duration_seconds and
// veil_collector_last_success_timestamp_seconds{controller, collector} for every controller.
type runStatusCollector struct {
	source                         func() []controllerRuns
	success, duration, lastSuccess *prometheus.Desc
}

func newRunStatusCollector(source func() []controllerRuns) *runStatusCollector {
	labels := []string{"controller", "collector"}
	return &runStatusCollector{
		source: source,
		success: prometheus.NewDesc("veil_collector_success",
			"1 if the last background run of the collector succeeded (inventory collections every collect.interval, guest sweeps, event polls); a scrape reads the cached result and never runs a collector.",
			labels, nil),
		duration: prometheus.NewDesc("veil_collector_duration_seconds",
			"Duration of the last background run of the collector; cached, a scrape never runs a collector.",
			labels, nil),
		lastSuccess: prometheus.NewDesc("veil_collector_last_success_timestamp_seconds",
			"Unix time of the last successful background run of the collector, so time() minus it is the age of the cached data; 0 if it never succeeded.",
			labels, nil),
	}
}

func (c *runStatusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.success
	ch <- c.duration
	ch <- c.lastSuccess
}

func (c *runStatusCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cr := range c.source() {
		for _, r := range cr.reporters {
			for _, s := range r.RunStatus() {
				ch <- prometheus.MustNewConstMetric(c.success, prometheus.GaugeValue, metricutil.Bool(s.Success), cr.controller, s.Collector)
				ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, s.Duration.Seconds(), cr.controller, s.Collector)
				ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, metricutil.UnixSeconds(s.LastSuccess), cr.controller, s.Collector)
			}
		}
	}
}
