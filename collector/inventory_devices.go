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
		shown := shownRows(snap.Interfaces, func(r *inventory.Interface) string { return r.DomainID }, gone)
		for i := range snap.Interfaces {
			if r := &snap.Interfaces[i]; shown[i] {
				e.Add(d.ifaceInfo, 1, r.DomainID, r.ID, r.Name, r.MAC, r.Driver, r.NetworkID, r.Network)
			}
		}
		e.Flush()
		for i := range snap.Interfaces {
			if !shown[i] {
				continue
			}
			if r := snap.Interfaces[i].WithDetail(snap.Details); r.Up >= 0 {
				e.Add(d.ifaceUp, float64(r.Up), r.DomainID, r.ID)
			}
		}
		e.Flush()
	}
}

// shownRows tells, for each row, whether its VM is not gone: looked up once for all the
// families of the rows, not once per family (a map lookup per disk and family was a third of
// the emit's own time at 20,000 disks).
func shownRows[T any](rows []T, vm func(*T) string, gone func(string) bool) []bool {
	shown := make([]bool, len(rows))
	for i := range rows {
		shown[i] = !gone(vm(&rows[i]))
	}
	return shown
}

// goneDomains tells a VM id the snapshot's domains do not list ("" and ids before the first
// listing of the domains are never gone).
func goneDomains(snap *inventory.Snapshot) func(id string) bool {
	if snap.DomainsGen == 0 {
		return func(string) bool { return false }
	}
	return func(id string) bool {
		_, ok := snap.Domains.Find(id)
		return id != "" && !ok
	}
}

// emitVdisks sends the disk families, one after the other.
func (d *inventoryDescs) emitVdisks(e exposition.Sink, snap *inventory.Snapshot, gone func(string) bool) {
	// Rows are passed by value: a pointer to the row with its detail would escape, one
	// allocation per disk and family.
	shown := shownRows(snap.Vdisks, func(r *inventory.Vdisk) string { return r.DomainID }, gone)
	each := func(detail bool, f func(r inventory.Vdisk)) {
		for i := range snap.Vdisks {
			if !shown[i] {
				continue
			}
			r := snap.Vdisks[i]
			if detail { // the sizes are not in the detail (WithDetail): no lookup for them
				r = r.WithDetail(snap.Details)
			}
			f(r)
		}
		e.Flush()
	}
	each(true, func(r inventory.Vdisk) {
		e.Add(d.vdiskInfo, 1, r.ID, r.Name, r.DomainID, r.Domain, r.DatapoolID, r.Status, r.Bus, r.Type)
	})
	each(false, func(r inventory.Vdisk) {
		if r.Provisioned >= 0 {
			e.Add(d.vdiskProvisioned, r.Provisioned, r.ID, r.DomainID, r.DatapoolID)
		}
	})
	each(false, func(r inventory.Vdisk) {
		if r.Allocated >= 0 {
			e.Add(d.vdiskAllocated, r.Allocated, r.ID, r.DomainID, r.DatapoolID)
		}
	})
	each(true, func(r inventory.Vdisk) {
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
