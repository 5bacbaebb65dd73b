package exposition

// Sink: where one emit of a collector goes, rendered (Builder) or live (Live).

import "github.com/prometheus/client_golang/prometheus"

// Sink takes the series of one emit: a Builder (the rendered path) or a Live channel of const
// metrics (the path of name[] filters and the protobuf text forms). A collector writes one
// emit function per family against a Sink, so both paths carry the same series.
type Sink interface {
	// Add adds one series of d.
	Add(d *Desc, v float64, labels ...string)
	// Flush says the families added so far are complete: none of them may follow again in
	// this emit.
	Flush()
	// Keep adds the family of d as the previous render holds it and reports true, when the
	// Sink has a previous render; false means the caller must emit the family.
	Keep(d *Desc) bool
}

// Live is the Sink of the live path: each series is sent on the channel as a const metric
// of its Desc's type.
type Live chan<- prometheus.Metric

// Add sends one series; a label value that is not valid UTF-8 drops that series, not the
// scrape, as the Builder drops it.
func (l Live) Add(d *Desc, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(d.Prom, d.typ, v, labels...); err == nil {
		l <- m
	}
}

// Flush does nothing: a live series is sent as it is added.
func (Live) Flush() {}

// Keep reports false: the live path has no previous render.
func (Live) Keep(*Desc) bool { return false }
