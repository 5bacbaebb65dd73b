package collector

// Inventory: the metric view of one controller's store. It renders each snapshot the store
// stores (the gauges, once per change) and keeps the task families, which count the tasks the
// store sees finishing.

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
)

// Inventory turns the snapshots of one store into metrics: the gauges rendered once per
// snapshot (Rendered), the task counters and histograms live (CollectLive). It never calls the
// platform API. What the last render showed is its Set's (exposition.Set.Source: the snapshot
// rendered), not the view's.
type Inventory struct {
	store      *inventory.Store
	fams       *inventoryFamilies
	tasks      *taskMetrics
	cache      *exposition.Cache
	renderHook func(applied uint64) // nil; set by benchmarks before Run: after each render
}

// NewInventory returns the metric view of store and counts the tasks it sees finishing from
// its next refresh; call it before the store's Run. Its renders yield to the scrapes of r and
// prepare the formats they ask for (nil: neither).
func NewInventory(store *inventory.Store, r *exposition.Renderer) *Inventory {
	controller := store.Controller()
	v := &Inventory{store: store, fams: newInventoryFamilies(controller), tasks: newTaskMetrics(controller)}
	store.SetTaskObserver(v.tasks.observe)
	v.cache = exposition.NewCache(r, exposition.Pace{}, v.render, v.rendered)
	return v
}

// Run renders every snapshot the store stores, one render at a time (a snapshot stored while
// one renders is in the next), until ctx is done.
func (v *Inventory) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.cache.Run(ctx)
	}()
	defer func() { <-done }()
	snap := v.shown() // the first render's: only Run renders after it
	for {
		select {
		case <-ctx.Done():
			return
		case <-snap.Changed():
		}
		snap = v.store.Snapshot()
		v.cache.Invalidate()
	}
}

// shown is the snapshot the last render showed (NewCache rendered one).
func (v *Inventory) shown() *inventory.Snapshot {
	snap, _ := v.cache.Set().Source().(*inventory.Snapshot)
	return snap
}

// Ready reports whether the store's first refresh has finished and its series are rendered
// (every snapshot after a refresh's says Refreshed).
func (v *Inventory) Ready() bool { return v.shown().Refreshed }

// Rendered is the text of the gauges of the last snapshot rendered.
func (v *Inventory) Rendered() *exposition.Set { return v.cache.Set() }

// CollectRendered sends what Rendered holds, encoded live from the latest snapshot.
func (v *Inventory) CollectRendered(ch chan<- prometheus.Metric) {
	v.fams.render(exposition.Live(ch), v.store.Snapshot())
}

// CollectLive sends the families that Rendered leaves out: the task counters and histograms,
// absent while the task collection is off or unavailable.
func (v *Inventory) CollectLive(ch chan<- prometheus.Metric) {
	if v.store.Snapshot().TaskCounts == nil {
		return
	}
	v.tasks.collect(ch)
}

// render adds the latest snapshot's series to s (the Cache's emit), kept or patched against the
// snapshot of the Set it replaces.
func (v *Inventory) render(s exposition.Sink) { v.fams.render(s, v.store.Snapshot()) }

// rendered follows each render (the benchmarks' hook).
func (v *Inventory) rendered() {
	if v.renderHook != nil {
		v.renderHook(v.shown().Applied)
	}
}
