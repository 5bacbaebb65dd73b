package exposition

// Sink: where one emit of a collector goes, rendered (a Builder) or live (a channel).

import "github.com/prometheus/client_golang/prometheus"

// Sink takes the series of one emit: a Builder's (the rendered path) or a channel of const
// metrics (Live: the path of name[] filters and the protobuf text forms). A collector writes
// one emit function per family against a Sink, so both paths carry the same series. It is a
// struct, not an interface, so that the labels of a series added stay on the caller's stack.
type Sink struct {
	b    *Builder
	ch   chan<- prometheus.Metric
	live *live // the slabs of the live path's metrics
	rm   bool  // Add removes (Removing)
}

// Sink is the Sink that adds to b.
func (b *Builder) Sink() Sink { return Sink{b: b} }

// Live is the Sink of the live path: each series is sent on ch as a metric of its Desc's type
// that every encoder writes as it writes prometheus.NewConstMetric's.
func Live(ch chan<- prometheus.Metric) Sink { return Sink{ch: ch, live: &live{}} }

// Add adds one series of d. A series the Builder refuses (a label value not valid UTF-8, a
// wrong label count) is dropped on the live path too: that one series, not the scrape.
func (s Sink) Add(d *Desc, v float64, labels ...string) {
	switch {
	case s.rm && s.b != nil:
		s.b.Remove(d, labels...)
		return
	case s.rm:
		return
	case s.b != nil:
		s.b.Add(d, v, labels...)
		return
	case d.liveOK:
		s.live.add(s.ch, d, v, labels)
		return
	}
	if m, err := prometheus.NewConstMetric(d.Prom, d.typ, v, labels...); err == nil {
		s.ch <- m
	}
}

// Flush says the families added so far are complete: none of them may follow again in this
// emit (a Builder compresses them and releases their text; the live path has sent them).
func (s Sink) Flush() {
	if s.b != nil {
		s.b.Flush()
	}
}

// Keep adds the family of d as the previous render holds it and reports true when there is a
// previous render; false (the live path, a first render) means the caller must emit the
// family.
func (s Sink) Keep(d *Desc) bool { return s.b != nil && s.b.Keep(d) }

// Patch says that this emit changes the previous render's family of d instead of emitting it
// whole: the series of the objects that changed are removed (through Removing, as they were
// emitted) and added. False (the live path, a first render, a family the previous render had
// no series of) means the caller must emit the family whole.
func (s Sink) Patch(d *Desc) bool { return s.b != nil && !s.rm && s.b.Patch(d) }

// Removing is the Sink whose Add removes the series of those labels from a patched family, so
// that a collector removes an object's old series by emitting its old version.
func (s Sink) Removing() Sink { return Sink{b: s.b, rm: true} }

// Rendering says what this emit renders (the collector's state, immutable): the Set it makes
// holds it as its Source, and the next emit reads it back as Previous. The live path keeps
// nothing.
func (s Sink) Rendering(source any) {
	if s.b != nil && !s.rm {
		s.b.source = source
	}
}

// Previous is the Source of the Set this emit replaces: nil on the live path, at a first
// render or when the previous emit said nothing. What the collector keeps or patches is
// judged against it, so the render state is the Set's, not the collector's.
func (s Sink) Previous() any {
	if s.b == nil || s.b.prev == nil {
		return nil
	}
	return s.b.prev.source
}
