// What readers get from a store without waiting for a refresh: the domains (with their
// generation) for the guest checker, readiness, and the status (with the refresh record's part,
// record.go).

package inventory

import (
	"time"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Status is what the status page shows of one controller's inventory.
type Status struct {
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

// Domains returns the latest snapshot's domains after domain_include/exclude, in a slice of
// their own (the VMs they point to are shared: callers must not modify them).
func (s *Store) Domains() []*veil.Domain {
	return s.Snapshot().Domains.Slice()
}

// DomainsGen returns Domains with its generation, which grows each time the domains are read
// again (0 before the first read), so a follower compares one number to know it has news.
func (s *Store) DomainsGen() ([]*veil.Domain, uint64) {
	snap := s.Snapshot()
	return snap.Domains.Slice(), snap.DomainsGen
}

// Ready reports whether the first refresh has finished (successfully or not).
func (s *Store) Ready() bool {
	return s.Snapshot().Refreshed
}

// GuestTargets returns the VMs of the latest snapshot that service discovery lists
// (Snapshot.GuestTargets).
func (s *Store) GuestTargets() []GuestTarget {
	return s.Snapshot().GuestTargets()
}

// Status returns a copy of the inventory's state for the status page.
func (s *Store) Status() Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := s.snap
	st := Status{
		Controller:   s.controller,
		Up:           snap.Up,
		Ready:        snap.Refreshed,
		Nodes:        len(snap.Nodes),
		Clusters:     len(snap.Clusters),
		Datapools:    len(snap.Datapools),
		Domains:      snap.Domains.Len(),
		DomainsTotal: snap.DomainsTotal,
		Tasks:        map[string]int{},
		Version:      snap.Version,
	}
	s.record.fill(&st)
	for status, n := range snap.TaskCounts {
		st.Tasks[status] = int(n)
	}
	return st
}

// RunStatus reports the last run of each enabled collection (nodes, clusters, datapools,
// domains, tasks, vdisks, interfaces, version; backups are part of tasks) and of the device
// detail sweep where it runs (device_details) for the daemon's
// veil_collector_* families and the status page. It implements runstatus.Reporter.
func (s *Store) RunStatus() []runstatus.Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.record.runStatus(s.enabled)
}
