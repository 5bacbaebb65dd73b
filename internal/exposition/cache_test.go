package exposition

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// TestCacheRendersEachChange: without Run, Changed renders at once; with Run, Changed and
// Stale are rendered by Run's goroutine, and the last change is always in the Set.
func TestCacheRendersEachChange(t *testing.T) {
	d := NewDesc("state", "State.", prometheus.GaugeValue, nil, nil)
	var state, after atomic.Int64
	c := NewCache(nil, Pace{}, func(b *Builder, prev *Set) { b.Add(d, float64(state.Load())) }, func() { after.Add(1) })
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
	c.Changed()
	if value() != "# HELP state State.\n# TYPE state gauge\nstate 1\n" {
		t.Fatalf("Changed without Run did not render: %q", value())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	testutil.Eventually(t, 5*time.Second, func() bool { return c.running.Load() }, "Run runs")
	for i := 2; i < 50; i++ {
		state.Store(int64(i))
		if i%2 == 0 {
			c.Changed()
		} else {
			c.Stale()
		}
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return value() == "# HELP state State.\n# TYPE state gauge\nstate 49\n" }, "the last change rendered")
	cancel()
	<-done
}
