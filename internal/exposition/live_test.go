package exposition

// Tests of the live path's metrics against prometheus.NewConstMetric's.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// liveRows sends the rows of a renderable through the live Sink, as a collector's emit does.
type liveRows struct{ *renderable }

func (r liveRows) Collect(ch chan<- prometheus.Metric) {
	s := Live(ch)
	for _, x := range r.rows {
		s.Add(x.d, x.v, x.labels...)
	}
	s.Flush()
}

// TestLiveMetricsAreWhatClientGolangWrites: the series a live Sink sends scrape byte for byte
// as the same series made by prometheus.NewConstMetric, in the text format and OpenMetrics,
// and decode to the same families from protobuf; the series NewConstMetric refuses (a label
// value not UTF-8, a wrong label count) are dropped, each alone.
func TestLiveMetricsAreWhatClientGolangWrites(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 13))
		ctrls := controllers(r, "alpha", "beta", "gamma")[:1+r.IntN(3)]
		plain := NewDesc("e_plain", "No label at all.", prometheus.GaugeValue, nil, nil)
		two := NewDesc("e_two_total", "Two labels, no constant one.", prometheus.CounterValue, []string{"z", "a"}, nil)
		extra := &renderable{rows: []row{
			{d: plain, typ: prometheus.GaugeValue, v: 3},
			{d: two, typ: prometheus.CounterValue, v: 1, labels: []string{"z1", "a1"}},
			{d: two, typ: prometheus.CounterValue, v: 2, labels: []string{"z2"}}, // refused
			{d: two, typ: prometheus.CounterValue, v: 3, labels: []string{"z3", "a\xff"}},
			{d: two, typ: prometheus.CounterValue, v: 4, labels: []string{"z4", "a4"}},
		}}
		ctrls = append(ctrls, extra, vmFamilies(r))
		got, want := prometheus.NewRegistry(), prometheus.NewRegistry()
		for _, c := range ctrls {
			got.MustRegister(liveRows{c})
			want.MustRegister(c)
		}
		gh := promhttp.HandlerFor(got, promhttp.HandlerOpts{EnableOpenMetrics: true})
		wh := promhttp.HandlerFor(want, promhttp.HandlerOpts{EnableOpenMetrics: true})
		cases := append([]struct{ name, accept, contentType string }{{"text", "text/plain", "text/plain"}}, scrapeCases...)
		for _, sc := range cases {
			_, gb := get(t, gh, sc.accept, "identity")
			wresp, wb := get(t, wh, sc.accept, "identity")
			if !strings.HasPrefix(wresp.Header.Get("Content-Type"), sc.contentType) {
				t.Fatalf("%s: the reference answers %q", sc.name, wresp.Header.Get("Content-Type"))
			}
			if strings.HasPrefix(sc.contentType, "application/vnd.google.protobuf") {
				sameFamilies(t, gb, wb)
				continue
			}
			if !bytes.Contains(wb, []byte(`e_two_total{a="a4",z="z4"} 4`)) || bytes.Contains(wb, []byte(`z="z3"`)) {
				t.Fatalf("%s: the reference lacks a series or has a refused one:\n%s", sc.name, wb)
			}
			if !bytes.Equal(gb, wb) {
				t.Fatalf("seed %d, %s: the live scrape differs from client_golang's:\n%s", seed, sc.name, firstDiff(gb, wb))
			}
		}
	}
}

// TestLiveSlabsDoNotOverlap: series taken from one slab chunk and from the next keep their
// own labels and values after many more were taken.
func TestLiveSlabsDoNotOverlap(t *testing.T) {
	d := NewDesc("x", "X.", prometheus.GaugeValue, []string{"b", "a"}, prometheus.Labels{"c": "k"})
	n := 3*slabMax + 7
	ch := make(chan prometheus.Metric, n)
	s := Live(ch)
	for i := range n {
		s.Add(d, float64(i), strings.Repeat("b", i%5), strings.Repeat("a", i%7))
	}
	close(ch)
	i := 0
	for m := range ch {
		want := prometheus.MustNewConstMetric(d.Prom, prometheus.GaugeValue, float64(i), strings.Repeat("b", i%5), strings.Repeat("a", i%7))
		var g, w dto.Metric
		if err := m.Write(&g); err != nil {
			t.Fatal(err)
		}
		if err := want.Write(&w); err != nil {
			t.Fatal(err)
		}
		if m.Desc() != d.Prom || !proto.Equal(&g, &w) {
			t.Fatalf("series %d: %v, want %v", i, &g, &w)
		}
		i++
	}
	if i != n {
		t.Fatalf("%d series, want %d", i, n)
	}
}

// vmFamilies are families over the same objects in the same order, some skipped, with labels
// of few values and runs of one value: the live path shares their label pairs between series.
func vmFamilies(r *rand.Rand) *renderable {
	a := NewDesc("vm_a", "A.", prometheus.GaugeValue, []string{"domain_id", "status"}, prometheus.Labels{"controller": "c"})
	b := NewDesc("vm_b_total", "B.", prometheus.CounterValue, []string{"zone", "domain_id", "status"}, nil)
	c := NewDesc("vm_c", "C.", prometheus.GaugeValue, []string{"status", "i"}, nil)
	statuses := []string{"running", "stopped", "", "a\"b"}
	out := &renderable{}
	status := func() string { return statuses[r.IntN(len(statuses))] }
	for i := range 300 {
		out.rows = append(out.rows, row{d: a, typ: prometheus.GaugeValue, v: float64(i), labels: []string{fmt.Sprint(i), status()}})
	}
	for i := range 300 {
		if r.IntN(7) == 0 {
			continue
		}
		id := fmt.Sprint(i)
		if r.IntN(5) == 0 {
			id = fmt.Sprint(i + 1000) // not the id at this position of vm_a
		}
		out.rows = append(out.rows, row{d: b, typ: prometheus.CounterValue, v: float64(i), labels: []string{status(), id, status()}})
	}
	for i := range 50 {
		out.rows = append(out.rows, row{d: c, typ: prometheus.GaugeValue, v: float64(i), labels: []string{status(), fmt.Sprint(i)}})
	}
	return out
}
