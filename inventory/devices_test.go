package inventory

import (
	"slices"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestDevicesChanged: a refresh that read the same devices leaves DevicesGen (and the device
// families rendered) as they were; each thing the families are made of moves it.
func TestDevicesChanged(t *testing.T) {
	base := func() *Snapshot {
		return &Snapshot{
			DomainsGen:      3,
			Domains:         NewVMs([]*veil.Domain{{ID: "d1", VerboseName: "a"}, {ID: "d2"}}),
			Datapools:       []veil.Datapool{{ID: "p1", UsedSpace: 1}},
			Vdisks:          []Vdisk{{ID: "v1", DomainID: "d1", DatapoolID: "p1", Provisioned: 1, Allocated: 2, Snapshots: -1}},
			Interfaces:      []Interface{{ID: "i1", DomainID: "d1", Up: -1}},
			PoolProvisioned: map[string]float64{"p1": 1},
		}
	}
	same := base()
	same.DomainsGen = 4
	same.Domains = NewVMs([]*veil.Domain{{ID: "d1", VerboseName: "renamed", Status: "x"}, {ID: "d2"}}) // not shown by devices
	same.Datapools = []veil.Datapool{{ID: "p1", UsedSpace: 7}}
	if devicesChanged(base(), same) {
		t.Error("the same devices, VMs and datapools read again: changed")
	}
	for name, edit := range map[string]func(s *Snapshot){
		"disk size": func(s *Snapshot) {
			s.Vdisks = []Vdisk{{ID: "v1", DomainID: "d1", DatapoolID: "p1", Provisioned: 1, Allocated: 3, Snapshots: -1}}
		},
		"disks not read": func(s *Snapshot) { s.Vdisks = nil },
		"disks none":     func(s *Snapshot) { s.Vdisks = []Vdisk{} },
		"interface":      func(s *Snapshot) { s.Interfaces = []Interface{{ID: "i1", DomainID: "d1", Up: 1}} },
		"ifaces none":    func(s *Snapshot) { s.Interfaces = []Interface{} },
		"pool size":      func(s *Snapshot) { s.PoolProvisioned = map[string]float64{"p1": 2} },
		"pool gone":      func(s *Snapshot) { s.Datapools = nil },
		"VM gone":        func(s *Snapshot) { s.Domains = s.Domains.remove("d2") },
		"VM other":       func(s *Snapshot) { s.Domains = NewVMs([]*veil.Domain{{ID: "d1"}, {ID: "d3"}}) },
		"never listed":   func(s *Snapshot) { s.DomainsGen = 0 },
	} {
		next := base()
		edit(next)
		if !devicesChanged(base(), next) {
			t.Errorf("%s: not changed", name)
		}
	}
}

// TestSortDomains: the domains end sorted by id, each one whole, equal ids in their order.
func TestSortDomains(t *testing.T) {
	for _, ids := range [][]string{{}, {"a"}, {"b", "a"}, {"c", "a", "b", "e", "d"}, {"b", "a", "b", "a"}, {"a", "b", "c"}} {
		ds := make([]veil.Domain, len(ids))
		for i, id := range ids {
			ds[i] = veil.Domain{ID: id, VerboseName: id + string(rune('0'+i))}
		}
		want := slices.Clone(ds)
		slices.SortStableFunc(want, func(a, b veil.Domain) int { return strings.Compare(a.ID, b.ID) })
		sortDomains(ds)
		if !slices.EqualFunc(ds, want, func(a, b veil.Domain) bool { return a.ID == b.ID && a.VerboseName == b.VerboseName }) {
			t.Errorf("%v: got %v, want %v", ids, ds, want)
		}
	}
}
