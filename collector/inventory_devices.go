package collector

// The device families of a snapshot: virtual disks, datapools' provisioned sizes and the VMs'
// network interfaces, each with what the detail sweep added (inventory.Vdisk.WithDetail).
// Disks and interfaces are listed every collect.resync_interval only: those of a VM the
// domains no longer list (deleted since, by a refresh or a push) are left out, not exported
// with a stale VM.

import (
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
)

// vdiskUnitHelp ends the HELP of the disk sizes: the platform's unit is assumed where the
// store reads them (inventory.Vdisk).
const vdiskUnitHelp = " The platform sends GB without documenting the unit; taken as GiB (2^30 bytes)."

// emitDevices sends the device families of the snapshot, one family after the other. With keep,
// nothing they are made of changed since the last render (a push changed a VM's power, say):
// the families are kept as rendered, neither formatted nor compressed again.
func (d *inventoryDescs) emitDevices(e exposition.Sink, snap *inventory.Snapshot, keep bool) {
	if keep && e.Keep(d.vdiskInfo) {
		for _, f := range []*exposition.Desc{d.vdiskProvisioned, d.vdiskAllocated, d.vdiskSnapshots, d.datapoolProvisioned, d.ifaceInfo, d.ifaceUp} {
			e.Keep(f)
		}
		return
	}
	gone := goneDomains(snap)
	if snap.Vdisks != nil {
		d.emitVdisks(e, snap, gone)
		d.emitPoolProvisioned(e, snap)
	}
	if snap.Interfaces != nil {
		for i := range snap.Interfaces {
			if r := &snap.Interfaces[i]; !gone(r.DomainID) {
				e.Add(d.ifaceInfo, 1, r.DomainID, r.ID, r.Name, r.MAC, r.Driver, r.NetworkID, r.Network)
			}
		}
		e.Flush()
		for i := range snap.Interfaces {
			if r := snap.Interfaces[i].WithDetail(snap.Details); r.Up >= 0 && !gone(r.DomainID) {
				e.Add(d.ifaceUp, float64(r.Up), r.DomainID, r.ID)
			}
		}
		e.Flush()
	}
}

// goneDomains tells a VM id the snapshot's domains do not list ("" and ids before the first
// listing of the domains are never gone).
func goneDomains(snap *inventory.Snapshot) func(id string) bool {
	if snap.DomainsGen == 0 {
		return func(string) bool { return false }
	}
	live := make(map[string]struct{}, len(snap.Domains))
	for i := range snap.Domains {
		live[snap.Domains[i].ID] = struct{}{}
	}
	return func(id string) bool {
		_, ok := live[id]
		return id != "" && !ok
	}
}

// emitVdisks sends the disk families, one after the other.
func (d *inventoryDescs) emitVdisks(e exposition.Sink, snap *inventory.Snapshot, gone func(string) bool) {
	// Rows are passed by value: a pointer to the row with its detail would escape, one
	// allocation per disk and family.
	each := func(f func(r inventory.Vdisk)) {
		for i := range snap.Vdisks {
			if r := snap.Vdisks[i].WithDetail(snap.Details); !gone(r.DomainID) {
				f(r)
			}
		}
		e.Flush()
	}
	each(func(r inventory.Vdisk) {
		e.Add(d.vdiskInfo, 1, r.ID, r.Name, r.DomainID, r.Domain, r.DatapoolID, r.Status, r.Bus, r.Type)
	})
	each(func(r inventory.Vdisk) {
		if r.Provisioned >= 0 {
			e.Add(d.vdiskProvisioned, r.Provisioned, r.ID, r.DomainID, r.DatapoolID)
		}
	})
	each(func(r inventory.Vdisk) {
		if r.Allocated >= 0 {
			e.Add(d.vdiskAllocated, r.Allocated, r.ID, r.DomainID, r.DatapoolID)
		}
	})
	each(func(r inventory.Vdisk) {
		if r.Snapshots >= 0 {
			e.Add(d.vdiskSnapshots, float64(r.Snapshots), r.ID, r.DomainID, r.DatapoolID)
		}
	})
}

// emitPoolProvisioned sends every known datapool's provisioned size, 0 without disks, and that
// of any datapool a disk names that the datapools collection did not list.
func (d *inventoryDescs) emitPoolProvisioned(e exposition.Sink, snap *inventory.Snapshot) {
	seen := make(map[string]bool, len(snap.Datapools))
	for i := range snap.Datapools {
		id := snap.Datapools[i].ID
		seen[id] = true
		e.Add(d.datapoolProvisioned, snap.PoolProvisioned[id], id)
	}
	for id, v := range snap.PoolProvisioned {
		if !seen[id] {
			e.Add(d.datapoolProvisioned, v, id)
		}
	}
	e.Flush()
}
