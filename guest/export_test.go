package guest

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// Describe implements prometheus.Collector.
func (g *Checker) Describe(ch chan<- *prometheus.Desc) {
	d := g.descs
	for _, desc := range []*exposition.Desc{d.pingSuccess, d.pingDuration, d.osInfo, d.fsSize, d.fsUsed,
		d.clockOffset, d.sweepDuration, d.eligible, d.checked, d.unsupported} {
		ch <- desc.Prom
	}
	for _, desc := range slices.Concat(d.net[:], d.disk[:], d.load[:], []*exposition.Desc{d.cpuSeconds}) {
		ch <- desc.Prom
	}
	ch <- d.cmdErrors
}

// Collect implements prometheus.Collector: the live path of what Rendered holds, and the
// command errors. The run status (veil_collector_*) is not sent here: the daemon emits it
// from RunStatus.
func (g *Checker) Collect(ch chan<- prometheus.Metric) {
	g.CollectRendered(ch)
	g.CollectLive(ch)
}
