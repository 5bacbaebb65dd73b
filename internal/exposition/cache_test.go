package exposition

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// TestCacheRendersEachChange: NewCache renders once; Invalidate never renders itself; Run
// renders after it, and the last change is always in the Set.
func TestCacheRendersEachChange(t *testing.T) {
	d := NewDesc("state", "State.", prometheus.GaugeValue, nil, nil)
	var state, after atomic.Int64
	c := NewCache(nil, Pace{}, func(s Sink) { s.Add(d, float64(state.Load())) }, func() { after.Add(1) })
	value := func() string {
		text, err := Families([]*Set{c.Set()})
		if err != nil {
			t.Fatal(err)
		}
		return string(text)
	}
	if after.Load() != 1 || value() != "# HELP state State.\n# TYPE state gauge\nstate 0\n" {
		t.Fatalf("first render: %d renders, %q", after.Load(), value())
	}
	state.Store(1)
	c.Invalidate()
	if after.Load() != 1 || value() != "# HELP state State.\n# TYPE state gauge\nstate 0\n" {
		t.Fatalf("Invalidate rendered by itself: %d renders, %q", after.Load(), value())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	for i := 2; i < 50; i++ {
		state.Store(int64(i))
		c.Invalidate()
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return value() == "# HELP state State.\n# TYPE state gauge\nstate 49\n" }, "the last change rendered")
	cancel()
	<-done
	if n := after.Load(); n > 50 {
		t.Errorf("%d renders for 49 changes", n)
	}
}

// TestLiveSinkSendsWhatBuilderRenders: the same emit through Live and through a Builder gives
// the same series; Keep is false on the live path and without a previous Set.
func TestLiveSinkSendsWhatBuilderRenders(t *testing.T) {
	d := NewDesc("x_total", "X.", prometheus.CounterValue, []string{"k"}, nil)
	emit := func(s Sink) {
		if s.Keep(d) {
			t.Fatal("Keep true without a previous render")
		}
		s.Add(d, 2, "b")
		s.Add(d, 1, "a")
		s.Add(d, 3, "\xff") // not UTF-8: dropped on both paths
		s.Flush()
	}
	ch := make(chan prometheus.Metric, 4)
	emit(Live(ch))
	close(ch)
	n := 0
	for range ch {
		n++
	}
	if n != 2 {
		t.Errorf("live: %d series, want 2", n)
	}
	c := NewCache(nil, Pace{}, emit, nil)
	text, err := Families([]*Set{c.Set()})
	if err != nil {
		t.Fatal(err)
	}
	if want := "# HELP x_total X.\n# TYPE x_total counter\nx_total{k=\"a\"} 1\nx_total{k=\"b\"} 2\n"; string(text) != want {
		t.Errorf("rendered %q, want %q", text, want)
	}
}

// TestCacheNowEndsThePause: after a render Run pauses (an hour here), so a change said by
// Invalidate waits; one said by Now is rendered at once, and so is what Invalidate said before.
func TestCacheNowEndsThePause(t *testing.T) {
	d := NewDesc("state", "State.", prometheus.GaugeValue, nil, nil)
	var state atomic.Int64
	c := NewCache(nil, Pace{Every: time.Hour}, func(s Sink) { s.Add(d, float64(state.Load())) }, nil)
	value := func() string {
		text, err := Families([]*Set{c.Set()})
		if err != nil {
			t.Fatal(err)
		}
		return string(text)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	state.Store(1)
	c.Invalidate()
	testutil.Eventually(t, 5*time.Second, func() bool { return value() == "# HELP state State.\n# TYPE state gauge\nstate 1\n" }, "the first change rendered")
	// Run is in its hour's pause now (or about to be): what it renders next is one render.
	state.Store(2)
	c.Invalidate()
	c.Now()
	testutil.Eventually(t, 5*time.Second, func() bool { return value() == "# HELP state State.\n# TYPE state gauge\nstate 2\n" }, "the change said by Now rendered within the pause")
	state.Store(3)
	c.Now()
	testutil.Eventually(t, 5*time.Second, func() bool { return value() == "# HELP state State.\n# TYPE state gauge\nstate 3\n" }, "a second Now rendered too")
}
