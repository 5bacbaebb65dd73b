package collector

// Inventory: the metric view of one controller's store. It renders each snapshot the store
// stores (the gauges, once per change) and keeps the task families, which count the tasks the
// store sees finishing.

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
)

// Inventory turns the snapshots of one store into metrics: the gauges rendered once per
// snapshot (Rendered), the task counters and histograms live (CollectLive). It never calls the
// platform API.
type Inventory struct {
	store *inventory.Store
	descs *inventoryDescs
	tasks *taskMetrics
	cache *exposition.Cache
	// watched is the snapshot Run waits on first: the one the first render read, or older.
	watched *inventory.Snapshot
	ready   atomic.Bool
	shown   atomic.Uint64 // Gen of the snapshot the last render stored shows

	// The render in progress, under the cache's lock: whether its snapshot is a refresh's, how
	// many pushed frames it holds, and what the device families were last rendered from.
	renderedRefresh    bool
	renderedApplied    uint64
	renderedGen        uint64
	renderedDevicesGen uint64
	devicesRendered    bool
	renderedDomains    *inventory.VMs       // of the last render's snapshot (immutable), nil before it
	renderedDomainsGen uint64               // its DomainsGen
	backupsShown       bool                 // the last render's snapshot had tasks read: it showed the backups
	renderedBackupsGen uint64               // of its backups
	last               lastRender           // its nodes, clusters and datapools
	renderHook         func(applied uint64) // nil; set by benchmarks before Run: after each render
}

// NewInventory returns the metric view of store and counts the tasks it sees finishing from
// its next refresh; call it before the store's Run. Its renders yield to the scrapes of r and
// prepare the formats they ask for (nil: neither).
func NewInventory(store *inventory.Store, r *exposition.Renderer) *Inventory {
	controller := store.Controller()
	v := &Inventory{store: store, descs: newInventoryDescs(controller), tasks: newTaskMetrics(controller)}
	store.SetTaskObserver(v.tasks.observe)
	v.watched = store.Snapshot()
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
	snap := v.watched
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

// Ready reports whether the store's first refresh has finished and its series are rendered.
func (v *Inventory) Ready() bool { return v.ready.Load() }

// Rendered is the text of the gauges of the last snapshot rendered.
func (v *Inventory) Rendered() *exposition.Set { return v.cache.Set() }

// CollectRendered sends what Rendered holds, encoded live from the latest snapshot.
func (v *Inventory) CollectRendered(ch chan<- prometheus.Metric) {
	v.emit(exposition.Live(ch), v.store.Snapshot(), lastRender{}, false)
}

// CollectLive sends the families that Rendered leaves out: the task counters and histograms,
// absent while the task collection is off or unavailable.
func (v *Inventory) CollectLive(ch chan<- prometheus.Metric) {
	if v.store.Snapshot().TaskCounts == nil {
		return
	}
	v.tasks.collect(ch)
}

// render adds the latest snapshot's series to s (the Cache's emit). The device families are
// kept from the previous render while nothing they are made of changed.
func (v *Inventory) render(s exposition.Sink) {
	snap := v.store.Snapshot()
	keepDevices := v.devicesRendered && snap.DevicesGen == v.renderedDevicesGen
	v.devicesRendered, v.renderedDevicesGen = true, snap.DevicesGen
	prev := lastRender{vms: v.renderedDomains}
	if snap.DomainsGen == 0 {
		prev.vms = nil // never listed: nothing to tell from the last render's none
	}
	prev.changed, prev.known = snap.DomainsChangedSince(v.renderedDomainsGen)
	prev.backupsShown, prev.backupsGen = v.backupsShown, v.renderedBackupsGen
	prev.nodes, prev.clusters, prev.pools, prev.hosts = v.last.nodes, v.last.clusters, v.last.pools, v.last.hosts
	v.emit(s, snap, prev, keepDevices)
	v.last.nodes, v.last.clusters, v.last.pools, v.last.hosts = snap.Nodes, snap.Clusters, snap.Datapools, true
	v.renderedDomains, v.renderedDomainsGen = &snap.Domains, snap.DomainsGen
	v.backupsShown, v.renderedBackupsGen = snap.TaskCounts != nil, snap.BackupsGen
	v.renderedRefresh, v.renderedApplied, v.renderedGen = snap.Refreshed, snap.Applied, snap.Gen
}

// rendered follows each render: /metrics has the first refresh once one was rendered.
func (v *Inventory) rendered() {
	v.shown.Store(v.renderedGen)
	if v.renderedRefresh {
		v.ready.Store(true)
	}
	if v.renderHook != nil {
		v.renderHook(v.renderedApplied)
	}
}
