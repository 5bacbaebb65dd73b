package exposition

// live: the metrics the live path sends, one per series, carved from slabs.

import (
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// liveLabel is one label of a family in the order client_golang sorts them (by name): a
// variable label's index and name, or a constant label's pair. Both are made once per Desc and
// shared by every series, as client_golang shares a Desc's constant label pairs.
type liveLabel struct {
	varIdx int
	name   *string
	pair   *dto.LabelPair // a constant label
}

// liveLabels returns the labels of a Desc in sorted order (slots), with the raw values of its
// constant labels.
func liveLabels(slots []slot, constLabels prometheus.Labels) []liveLabel {
	out := make([]liveLabel, len(slots))
	for i, s := range slots {
		name := s.label
		out[i] = liveLabel{varIdx: s.varIdx, name: &name}
		if s.varIdx < 0 {
			value := constLabels[s.label]
			out[i].pair = &dto.LabelPair{Name: &name, Value: &value}
		}
	}
	return out
}

// liveSeries is what a gauge and a counter of the live path have in common: the fields of the
// dto.Metric that prometheus.NewConstMetric would build, written by Write as its constMetric
// does, so that every encoder writes the same bytes.
type liveSeries struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

func (m *liveSeries) Desc() *prometheus.Desc { return m.desc }

type liveGauge struct {
	liveSeries
	gauge dto.Gauge
}

func (m *liveGauge) Write(out *dto.Metric) error {
	out.Label, out.Gauge = m.labels, &m.gauge
	return nil
}

type liveCounter struct {
	liveSeries
	counter dto.Counter
}

func (m *liveCounter) Write(out *dto.Metric) error {
	out.Label, out.Counter = m.labels, &m.counter
	return nil
}

// live holds the slabs of one live emit. A large emit sends hundreds of thousands of series;
// one allocation per series, its labels and its value (as NewConstMetric makes them) was most
// of the scrape's garbage, so they are carved from chunks instead. The chunks are never
// reused: the registry holds the metrics until the scrape is written.
type live struct {
	gauges   slab[liveGauge]
	counters slab[liveCounter]
	labels   slab[*dto.LabelPair]
	pairs    slab[dto.LabelPair]
	values   slab[string]
	// A label pair is shared by the series whose label has the same value, as every series
	// of a family shares its constant labels' pairs: that of the previous series of desc
	// (last: a status, a bus, the datapool of disks listed one after the other), or that of
	// the series at the same position in the previous family (prev: a VM's id in each of the
	// VM families, which list the VMs in the same order).
	desc, prevDesc *Desc
	last           []*dto.LabelPair // by slot of desc
	from           []int            // by slot of desc: the slot of that label in prevDesc, or -1
	cur, prev      []*liveSeries    // the series of desc and of prevDesc, in order
}

// add sends one series of d on ch, or drops it when client_golang would refuse it: a wrong
// label count or a label value not valid UTF-8.
func (l *live) add(ch chan<- prometheus.Metric, d *Desc, v float64, labels []string) {
	if len(labels) != d.nvar {
		return
	}
	for _, x := range labels {
		if !utf8.ValidString(x) {
			return
		}
	}
	var ls []*dto.LabelPair
	if len(d.live) > 0 {
		if l.desc != d {
			l.start(d)
		}
		ls = l.labels.take(len(d.live))
		for i, x := range d.live {
			if x.pair != nil {
				ls[i] = x.pair
				continue
			}
			ls[i] = l.pair(i, x.name, labels[x.varIdx])
		}
	}
	var m prometheus.Metric
	var sm *liveSeries
	if d.typ == prometheus.CounterValue {
		c := &l.counters.take(1)[0]
		c.counter.Value, sm, m = &c.value, &c.liveSeries, c
	} else {
		g := &l.gauges.take(1)[0]
		g.gauge.Value, sm, m = &g.value, &g.liveSeries, g
	}
	sm.desc, sm.labels, sm.value = d.Prom, ls, v
	if ls != nil {
		l.cur = append(l.cur, sm)
	}
	ch <- m // once it is whole: the registry reads it as it comes
}

// start makes d the family whose series follow, the one before it the previous family.
func (l *live) start(d *Desc) {
	l.prevDesc, l.desc = l.desc, d
	l.prev, l.cur = l.cur, l.prev[:0]
	l.last = append(l.last[:0], make([]*dto.LabelPair, len(d.live))...)
	l.from = l.from[:0]
	for _, x := range d.live {
		j := -1
		if l.prevDesc != nil && x.pair == nil {
			for k, y := range l.prevDesc.live {
				if y.pair == nil && *y.name == *x.name {
					j = k
				}
			}
		}
		l.from = append(l.from, j)
	}
}

// pair returns the label pair of the variable label in slot i of the next series of desc.
func (l *live) pair(i int, name *string, value string) *dto.LabelPair {
	p := l.last[i]
	if p == nil || *p.Value != value {
		p = nil
		if n, j := len(l.cur), l.from[i]; j >= 0 && n < len(l.prev) {
			if q := l.prev[n].labels[j]; *q.Value == value {
				p = q
			}
		}
	}
	if p == nil {
		v := &l.values.take(1)[0]
		*v = value
		p = &l.pairs.take(1)[0]
		p.Name, p.Value = name, v
	}
	l.last[i] = p
	return p
}

// slab hands out zeroed elements from chunks that grow from slabFirst to slabMax elements, so
// that a small emit (a name[] filter, a few series) does not allocate thousands.
type slab[T any] struct {
	free []T
	next int
}

const (
	slabFirst = 32
	slabMax   = 4096
)

// take returns n elements; the slice's capacity is n, so that nothing appended to it can
// reach another series' elements.
func (s *slab[T]) take(n int) []T {
	if len(s.free) < n {
		s.next = min(max(2*s.next, slabFirst), slabMax)
		s.free = make([]T, max(s.next, n))
	}
	t := s.free[:n:n]
	s.free = s.free[n:]
	return t
}
