package collector

// The device families, each declared once, and a snapshot's: virtual disks, datapools'
// provisioned sizes and the VMs' network interfaces, each with what the detail sweep added
// (inventory.Vdisk.WithDetail).
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

// rowFamily is a device family: a family of the rows, and whether it shows what the detail
// sweep added (the row WithDetail; the sizes are not in the detail, no lookup for them).
type rowFamily[T any] struct {
	family[T]
	detail bool
}

// rowsOf are the families of rows.
func rowsOf[T any](rows []rowFamily[T]) []family[T] {
	out := make([]family[T], len(rows))
	for k := range rows {
		out[k] = rows[k].family
	}
	return out
}

// vdiskFamilies are the disk families.
func vdiskFamilies(d gaugeDesc) []rowFamily[inventory.Vdisk] {
	return []rowFamily[inventory.Vdisk]{
		{family[inventory.Vdisk]{d("vdisk_info", "Virtual disk description from GET /api/vdisks/; value 1; domain_id and domain (the VM's name) are empty for a free disk; bus and type where the list carries target_bus and disk_type or the detail sweep read them (collect.device_details_interval; empty otherwise).",
			"vdisk_id", "vdisk", "domain_id", "domain", "datapool_id", "status", "bus", "type"),
			func(r *inventory.Vdisk, s *sample) {
				s.set(1, r.ID, r.Name, r.DomainID, r.Domain, r.DatapoolID, r.Status, r.Bus, r.Type)
			}}, true},
		{family[inventory.Vdisk]{d("vdisk_provisioned_bytes", "Size of the virtual disk as the guest sees it (virtual_size), in bytes."+vdiskUnitHelp, "vdisk_id", "domain_id", "datapool_id"),
			func(r *inventory.Vdisk, s *sample) {
				if r.Provisioned >= 0 {
					s.set(r.Provisioned, r.ID, r.DomainID, r.DatapoolID)
				}
			}}, false},
		{family[inventory.Vdisk]{d("vdisk_allocated_bytes", "Space the virtual disk takes on its datapool (size), in bytes."+vdiskUnitHelp, "vdisk_id", "domain_id", "datapool_id"),
			func(r *inventory.Vdisk, s *sample) {
				if r.Allocated >= 0 {
					s.set(r.Allocated, r.ID, r.DomainID, r.DatapoolID)
				}
			}}, false},
		{family[inventory.Vdisk]{d("vdisk_snapshots", "Snapshots of the virtual disk, where the disk list carries them or the detail sweep read them (collect.device_details_interval; absent otherwise).", "vdisk_id", "domain_id", "datapool_id"),
			func(r *inventory.Vdisk, s *sample) {
				if r.Snapshots >= 0 {
					s.set(float64(r.Snapshots), r.ID, r.DomainID, r.DatapoolID)
				}
			}}, true},
	}
}

// interfaceFamilies are the network interface families.
func interfaceFamilies(d gaugeDesc) []rowFamily[inventory.Interface] {
	return []rowFamily[inventory.Interface]{
		{family[inventory.Interface]{d("domain_interface_info", "Network interface of a VM from GET /api/vmachine-infs/; value 1.", "domain_id", "interface_id", "interface", "mac", "driver", "network_id", "network"),
			func(r *inventory.Interface, s *sample) {
				s.set(1, r.DomainID, r.ID, r.Name, r.MAC, r.Driver, r.NetworkID, r.Network)
			}}, false},
		{family[inventory.Interface]{d("domain_interface_up", "1 if the link of the VM's network interface is up, 0 if down (link_state); where the interface list carries link_state or the detail sweep read it (collect.device_details_interval; absent otherwise).", "domain_id", "interface_id"),
			func(r *inventory.Interface, s *sample) {
				if r.Up >= 0 {
					s.set(float64(r.Up), r.DomainID, r.ID)
				}
			}}, true},
	}
}

// emitDevices sends the device families of the snapshot, one family after the other. With keep,
// nothing they are made of changed since the last render (a push changed a VM's power, say):
// the families are kept as rendered, neither formatted nor compressed again.
func (f *inventoryFamilies) emitDevices(e exposition.Sink, snap *inventory.Snapshot, keep bool) {
	if keep && keepAll(e, rowsOf(f.vdisks)) {
		e.Keep(f.datapoolProvisioned)
		keepAll(e, rowsOf(f.ifaces))
		return
	}
	gone := goneDomains(snap)
	if snap.Vdisks != nil {
		shown := shownRows(snap.Vdisks, func(r *inventory.Vdisk) string { return r.DomainID }, gone)
		emitRows(e, f.vdisks, snap.Vdisks, shown, func(r inventory.Vdisk) inventory.Vdisk { return r.WithDetail(snap.Details) })
		f.emitPoolProvisioned(e, snap)
	}
	if snap.Interfaces != nil {
		shown := shownRows(snap.Interfaces, func(r *inventory.Interface) string { return r.DomainID }, gone)
		emitRows(e, f.ifaces, snap.Interfaces, shown, func(r inventory.Interface) inventory.Interface { return r.WithDetail(snap.Details) })
	}
}

// emitRows sends the families of the rows shown, one after the other, each row with its detail
// where the family shows it.
func emitRows[T any](e exposition.Sink, fams []rowFamily[T], rows []T, shown []bool, detail func(T) T) {
	s := new(sample)
	// The row with its detail is copied into one row for all: a pointer to each would escape,
	// one allocation per row and family.
	row := new(T)
	for k := range fams {
		f := &fams[k]
		for i := range rows {
			switch {
			case !shown[i]:
			case f.detail:
				*row = detail(rows[i])
				f.add(e, row, s)
			default:
				f.add(e, &rows[i], s)
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

// emitPoolProvisioned sends every known datapool's provisioned size, 0 without disks, and that
// of any datapool a disk names that the datapools collection did not list.
func (f *inventoryFamilies) emitPoolProvisioned(e exposition.Sink, snap *inventory.Snapshot) {
	seen := make(map[string]bool, len(snap.Datapools))
	for i := range snap.Datapools {
		id := snap.Datapools[i].ID
		seen[id] = true
		e.Add(f.datapoolProvisioned, snap.PoolProvisioned[id], id)
	}
	for id, v := range snap.PoolProvisioned {
		if !seen[id] {
			e.Add(f.datapoolProvisioned, v, id)
		}
	}
	e.Flush()
}
