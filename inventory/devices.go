package inventory

// The VMs' devices in the inventory: virtual disks (GET /api/vdisks/) and network interfaces
// (GET /api/vmachine-infs/), each one paginated list every collect.resync_interval. What only
// the details carry (a disk's bus, type and snapshots, an interface's link_state, as far as the
// vendor's clients show) is exported where the list carries it or where the detail sweep read
// it (collect.device_details_interval, details.go).

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/veil-exporter/veil-exporter/veil"
)

// vdiskUnitBytes is the unit of a disk's size and virtual_size. The platform does not document
// it; the vendor's create call takes both in the unit the UI shows, GB, taken here as GiB (the
// platform's other sizes are binary: MiB). The one place the assumption is made.
const vdiskUnitBytes = 1 << 30

// Vdisk is what the inventory keeps of a disk; a size below 0 is unknown.
type Vdisk struct {
	ID, Name, Status       string
	DomainID, Domain       string // "" for a free disk
	DatapoolID             string
	Bus, Type              string // only where the list carries target_bus, disk_type
	Provisioned, Allocated float64
	Snapshots              int // -1: the list does not carry them
}

// Interface is what the inventory keeps of a VM's network interface; Up is -1 where the list
// does not carry link_state.
type Interface struct {
	ID, Name, DomainID string
	MAC, Driver        string
	NetworkID, Network string
	Up                 int
}

// deviceDomainName is the name of the VM a device belongs to, for domain_include/exclude.
func deviceDomainName(r *veil.Ref, fallback string) string {
	if r != nil && r.VerboseName != "" {
		return r.VerboseName
	}
	return fallback
}

// bytesOf is a size in bytes, or -1 when it is absent or negative (nothing to invent).
func bytesOf(n *veil.Number) float64 {
	if n == nil || *n < 0 {
		return -1
	}
	return float64(*n) * vdiskUnitBytes
}

// vdiskRows keeps the disks of the VMs domain_include/exclude select and every free disk, and
// sums the virtual sizes of every disk per datapool (filtered or not: the datapool's overcommit).
func (f domainFilter) vdiskRows(all []veil.Vdisk) ([]Vdisk, map[string]float64) {
	rows := make([]Vdisk, 0, len(all))
	pools := map[string]float64{}
	for i := range all {
		v := &all[i]
		r := Vdisk{ID: v.ID, Name: v.VerboseName, Status: v.Status, DatapoolID: v.Datapool.ID,
			Bus: v.TargetBus, Type: v.DiskType, Provisioned: bytesOf(v.VirtualSize), Allocated: bytesOf(v.Size), Snapshots: -1}
		if r.DatapoolID != "" && r.Provisioned >= 0 {
			pools[r.DatapoolID] += r.Provisioned
		}
		if v.Domain != nil && v.Domain.ID != "" {
			r.DomainID, r.Domain = v.Domain.ID, v.Domain.VerboseName
			if !f.keep(r.Domain) {
				continue
			}
		}
		if v.Snapshots != nil {
			r.Snapshots = len(v.Snapshots)
		}
		rows = append(rows, r)
	}
	// In the order of the disk families' labels (controller, datapool_id, domain_id, vdisk_id):
	// a render then writes three of the four without sorting them.
	slices.SortFunc(rows, func(a, b Vdisk) int {
		return cmp.Or(strings.Compare(a.DatapoolID, b.DatapoolID), strings.Compare(a.DomainID, b.DomainID), strings.Compare(a.ID, b.ID))
	})
	return rows, pools
}

// ifaceRows keeps the interfaces of the VMs domain_include/exclude select.
func (f domainFilter) ifaceRows(all []veil.VMachineInf) []Interface {
	rows := make([]Interface, 0, len(all))
	for i := range all {
		v := &all[i]
		if v.Domain == nil || v.Domain.ID == "" || !f.keep(deviceDomainName(v.Domain, v.DomainName)) {
			continue // an interface of no VM names nothing to join on
		}
		r := Interface{ID: v.ID, Name: v.Name, DomainID: v.Domain.ID, MAC: strings.ToLower(v.MACAddress), Driver: v.NICDriver, Up: -1}
		if v.Network != nil {
			r.NetworkID, r.Network = v.Network.ID, v.Network.VerboseName
		}
		r.Up = linkUp(v.LinkState)
		rows = append(rows, r)
	}
	// In the order of domain_interface_up's labels (controller, domain_id, interface_id).
	slices.SortFunc(rows, func(a, b Interface) int {
		return cmp.Or(strings.Compare(a.DomainID, b.DomainID), strings.Compare(a.ID, b.ID))
	})
	return rows
}

// devicesChanged reports whether next differs from prev in anything the device families are
// made of: the disks and interfaces (read or not), the datapools' provisioned sizes and ids, and
// which VMs are listed (a device of a VM no longer listed is left out). The detail sweep and
// pushes move DevicesGen themselves.
func devicesChanged(prev, next *Snapshot) bool {
	return (prev.Vdisks == nil) != (next.Vdisks == nil) || !slices.Equal(prev.Vdisks, next.Vdisks) ||
		(prev.Interfaces == nil) != (next.Interfaces == nil) || !slices.Equal(prev.Interfaces, next.Interfaces) ||
		!maps.Equal(prev.PoolProvisioned, next.PoolProvisioned) ||
		(prev.DomainsGen == 0) != (next.DomainsGen == 0) ||
		!slices.EqualFunc(prev.Datapools, next.Datapools, func(a, b veil.Datapool) bool { return a.ID == b.ID }) ||
		!sameIDs(prev.Domains, next.Domains)
}
