package inventory

// Snapshot: what the store holds of one controller at one instant, immutable, with its
// generation and the signal that a newer one replaced it.

import (
	"sync"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// Snapshot is the store's state at one instant. It never changes: a refresh, a pushed batch or
// a detail sweep stores a new one (Store.Snapshot), and Changed is closed then. Its slices and
// maps are shared between snapshots and with readers: nobody may modify them.
type Snapshot struct {
	// Gen grows with every snapshot stored (1 is the store's first, before any refresh).
	Gen uint64
	// Up says the last refresh succeeded; Refreshed that one has finished (successfully or not).
	Up, Refreshed bool

	// Nodes are pointers, as Domains: a pushed batch copies one pointer per node, not each
	// node's value (most of a power change's allocation at 500 nodes).
	Nodes     []*veil.Node
	Clusters  []veil.Cluster
	Datapools []veil.Datapool
	// Domains are after domain_include/exclude, sorted by id. A push replaces the pointer of the
	// VM it changed, never the VM it points to, in a copy of the one chunk of the list that
	// holds it (VMs).
	Domains      VMs
	DomainsTotal int // before filtering
	// DomainsGen grows each time Domains is replaced (0 before the first read): a follower
	// compares one number to know it has news.
	DomainsGen uint64
	TaskCounts map[string]float64 // by status; nil: tasks not read (off or unavailable)
	Version    string             // of the platform; "" until read or where the controller lacks it

	Vdisks          []Vdisk            // of the VMs selected, and free disks; nil: not read
	PoolProvisioned map[string]float64 // datapool id → virtual sizes of every disk on it, bytes
	Interfaces      []Interface        // of the VMs selected; nil: not read
	// Details are what the detail sweep added, by disk and interface id (Vdisk.WithDetail).
	Details map[string]DeviceDetail
	// DevicesGen grows when what the device families are made of may have changed.
	DevicesGen uint64
	// Applied counts the pushed frames applied so far.
	Applied uint64
	// BackupsGen grows each time the last backups (Backups) are made again.
	BackupsGen uint64

	backups        map[string]LastBackup // by domain id; read through Backups
	backupLookback time.Duration
	// domainLog is what pushes did to Domains, one entry per DomainsGen they made, oldest first
	// (DomainsChangedSince). Shared between snapshots and appended to only past the end any
	// older snapshot holds.
	domainLog []domainEdit

	changed chan struct{} // closed when a newer snapshot is stored
	targets struct {      // GuestTargets, made at the first call
		once sync.Once
		v    []GuestTarget
	}
}

// Changed is closed once a newer snapshot has been stored.
func (s *Snapshot) Changed() <-chan struct{} { return s.changed }

// next returns a copy of s to change and store as the next generation.
func (s *Snapshot) next() *Snapshot {
	n := &Snapshot{
		Gen: s.Gen + 1, Up: s.Up, Refreshed: s.Refreshed,
		Nodes: s.Nodes, Clusters: s.Clusters, Datapools: s.Datapools, Domains: s.Domains,
		DomainsTotal: s.DomainsTotal, DomainsGen: s.DomainsGen, TaskCounts: s.TaskCounts, Version: s.Version,
		Vdisks: s.Vdisks, PoolProvisioned: s.PoolProvisioned, Interfaces: s.Interfaces, Details: s.Details,
		DevicesGen: s.DevicesGen, Applied: s.Applied, BackupsGen: s.BackupsGen,
		backups: s.backups, backupLookback: s.backupLookback, domainLog: s.domainLog,
		changed: make(chan struct{}),
	}
	return n
}

// domainEdit is a domain a push changed, added or deleted, making DomainsGen gen.
type domainEdit struct {
	gen uint64
	id  string
}

// maxDomainLog bounds the log of pushed domains: a reader that fell further behind compares
// every domain.
const maxDomainLog = 4096

// logDomain records that a push changed the domain id, making the snapshot's DomainsGen.
func (s *Snapshot) logDomain(id string) {
	if len(s.domainLog) >= maxDomainLog {
		s.domainLog = append([]domainEdit(nil), s.domainLog[len(s.domainLog)-maxDomainLog/4:]...)
	}
	s.domainLog = append(s.domainLog, domainEdit{s.DomainsGen, id})
}

// DomainsChangedSince returns the ids of the domains pushes changed, added or deleted since
// the snapshot whose DomainsGen was gen (an id may repeat), so that a reader compares those
// instead of every domain. False when something else replaced the domains since (a listing) or
// the log does not reach back that far: then every domain may have changed.
func (s *Snapshot) DomainsChangedSince(gen uint64) ([]string, bool) {
	if gen > s.DomainsGen {
		return nil, false
	}
	log := s.domainLog
	i := len(log) - int(s.DomainsGen-gen) // every generation since gen is a push's, each logged
	if i < 0 || i < len(log) && log[i].gen != gen+1 || len(log) > 0 && log[len(log)-1].gen != s.DomainsGen && gen != s.DomainsGen {
		return nil, false
	}
	ids := make([]string, 0, len(log)-i)
	for _, e := range log[i:] {
		ids = append(ids, e.id)
	}
	return ids, true
}

// refs points at each element of vs (a listing's VMs or nodes), in its order.
func refs[T any](vs []T) []*T {
	out := make([]*T, len(vs))
	for i := range vs {
		out[i] = &vs[i]
	}
	return out
}

// DomainBackup is one VM's last backup as the task journal told it.
type DomainBackup struct {
	ID string
	LastBackup
}

// Backups returns the last backups of the snapshot's domains, in their order (none while
// backups are not followed or tasks not read).
func (s *Snapshot) Backups() []DomainBackup {
	if len(s.backups) == 0 || s.TaskCounts == nil {
		return nil
	}
	var out []DomainBackup
	for d := range s.Domains.All() {
		if lb, ok := s.backups[d.ID]; ok {
			out = append(out, DomainBackup{d.ID, lb})
		}
	}
	return out
}
