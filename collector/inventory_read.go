// This file holds what readers get from an inventory without waiting for a refresh: the
// domains (with their generation) for the guest checker, readiness, and the status.

package collector

import (
	"slices"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/veil"
)

// InventoryStatus is what the status page shows of one controller's inventory.
type InventoryStatus struct {
	Controller   string
	Up           bool
	Ready        bool // the first refresh has finished (successfully or not)
	AuthFailed   bool
	LastAttempt  time.Time // start of the last finished refresh
	LastStart    time.Time // start of the refresh running now, or of the last one: the loop is alive
	LastDuration time.Duration
	LastError    string
	Nodes        int
	Clusters     int
	Datapools    int
	Domains      int // after domain_include/exclude
	DomainsTotal int
	Tasks        map[string]int // by status
	Version      string         // of the platform; "" until read or where the controller lacks it
}

// Domains returns the latest domain snapshot after domain_include/exclude. The slice is
// shared: callers must not modify it.
func (inv *Inventory) Domains() []veil.Domain {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.snap.domains
}

// DomainsGen returns Domains with its generation, which grows each time the domains are read
// again (0 before the first read), so a follower compares one number to know it has news.
func (inv *Inventory) DomainsGen() ([]veil.Domain, uint64) {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return inv.snap.domains, inv.snap.domainsGen
}

// Ready reports whether the first refresh has finished and its series are rendered.
func (inv *Inventory) Ready() bool {
	return inv.ready.Load()
}

// Status returns a copy of the inventory's state for the status page.
func (inv *Inventory) Status() InventoryStatus {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	st := InventoryStatus{
		Controller:   inv.controller,
		Up:           inv.up,
		Ready:        inv.refreshed,
		AuthFailed:   inv.authFailed,
		LastAttempt:  inv.lastAttempt,
		LastStart:    inv.lastStart,
		LastDuration: inv.lastDuration,
		LastError:    inv.lastError,
		Nodes:        len(inv.snap.nodes),
		Clusters:     len(inv.snap.clusters),
		Datapools:    len(inv.snap.datapools),
		Domains:      len(inv.snap.domains),
		DomainsTotal: inv.snap.domainsTotal,
		Tasks:        map[string]int{},
		Version:      inv.snap.version,
	}
	for s, n := range inv.snap.taskCounts {
		st.Tasks[s] = int(n)
	}
	return st
}

// RunStatus reports the last run of each enabled collection (nodes, clusters, datapools,
// domains, tasks, vdisks, interfaces, version; backups are part of tasks) and of the device
// detail sweep where it runs (device_details) for the daemon's
// veil_collector_* families and the status page. It implements runstatus.Reporter.
func (inv *Inventory) RunStatus() []runstatus.Status {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	out := make([]runstatus.Status, 0, len(inv.enabled)+1)
	names := inv.enabled
	if inv.runs[collDetails] != nil {
		names = append(slices.Clip(names), collDetails)
	}
	for _, name := range names {
		r := inv.runs[name]
		out = append(out, runstatus.Status{
			Collector: name, Success: r.success, Duration: r.duration, LastSuccess: r.lastSuccess,
			Unavailable: r.unavailable, Error: r.err,
		})
	}
	return out
}
