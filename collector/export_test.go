package collector

import "github.com/prometheus/client_golang/prometheus"

// Describe sends the Descs of every inventory family.
func (v *Inventory) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range v.fams.all() {
		ch <- d.Prom
	}
	v.tasks.describe(ch)
}

// Collect sends every inventory family, encoded live from the latest snapshot.
func (v *Inventory) Collect(ch chan<- prometheus.Metric) {
	v.CollectRendered(ch)
	v.CollectLive(ch)
}
