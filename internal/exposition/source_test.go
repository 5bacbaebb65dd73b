package exposition

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSourceIsTheSetsRenderState: each emit reads back as Previous what the emit of the Set it
// replaces said it rendered (Rendering), and the Set holds it as its Source; a first render,
// an emit that said nothing and the live path have none.
func TestSourceIsTheSetsRenderState(t *testing.T) {
	d := NewDesc("state", "State.", prometheus.GaugeValue, nil, nil)
	type state struct{ n int }
	var prevs []any
	next := 0
	c := NewCache(nil, Pace{}, func(s Sink) {
		prevs = append(prevs, s.Previous())
		next++
		if next != 3 { // the third emit says nothing
			s.Rendering(&state{next})
		}
		s.Add(d, float64(next))
	}, nil)
	if src, _ := c.Set().Source().(*state); src == nil || src.n != 1 {
		t.Fatalf("first Set's source %v", c.Set().Source())
	}
	rendered := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.after = func() { rendered <- struct{}{} }
	go c.Run(ctx)
	for range 3 {
		c.Invalidate()
		<-rendered
	}
	want := []int{0, 1, 2, 0} // 0: none
	for i, p := range prevs {
		got := 0
		if s, ok := p.(*state); ok {
			got = s.n
		} else if p != nil {
			t.Fatalf("emit %d: Previous %v", i+1, p)
		}
		if got != want[i] {
			t.Errorf("emit %d: Previous is the state of emit %d, want %d", i+1, got, want[i])
		}
	}
	if s, _ := c.Set().Source().(*state); s == nil || s.n != 4 {
		t.Errorf("last Set's source %v, want the fourth emit's", c.Set().Source())
	}
	live := Live(make(chan prometheus.Metric, 1))
	live.Rendering(&state{9})
	if live.Previous() != nil {
		t.Error("the live path has a previous render")
	}
}
