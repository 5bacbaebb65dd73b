package collector

// The VMs' devices in the inventory: virtual disks (GET /api/vdisks/) and network interfaces
// (GET /api/vmachine-infs/), each one paginated list every collect.resync_interval. What only
// the details carry (a disk's bus, type and snapshots, an interface's link_state, as far as the
// vendor's clients show) is exported where the list carries it or where the detail sweep read
// it (collect.device_details_interval, inventory_details.go).

import (
	"strings"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/veil"
)

// vdiskUnitBytes is the unit of a disk's size and virtual_size. The platform does not document
// it; the vendor's create call takes both in the unit the UI shows, GB, taken here as GiB (the
// platform's other sizes are binary: MiB). The one place the assumption is made.
const (
	vdiskUnitBytes = 1 << 30
	vdiskUnitHelp  = " The platform sends GB without documenting the unit; taken as GiB (2^30 bytes)."
)

// vdiskRow is what the inventory keeps of a disk; a size below 0 is unknown.
type vdiskRow struct {
	id, name, status       string
	domainID, domain       string // "" for a free disk
	datapoolID             string
	bus, typ               string // only where the list carries target_bus, disk_type
	provisioned, allocated float64
	snapshots              int // -1: the list does not carry them
}

// ifaceRow is what the inventory keeps of an interface; up is -1 where the list does not
// carry link_state.
type ifaceRow struct {
	id, name, domainID string
	mac, driver        string
	networkID, network string
	up                 int
}

// deviceDomainName is the name of the VM a device belongs to, for domain_include/exclude.
func deviceDomainName(r *veil.Ref, fallback string) string {
	if r != nil && r.VerboseName != "" {
		return r.VerboseName
	}
	return fallback
}

// keepDomain applies domain_include/exclude to a VM's name, as to the domains.
func (inv *Inventory) keepDomain(name string) bool {
	if inv.include != nil && !inv.include.MatchString(name) {
		return false
	}
	return inv.exclude == nil || !inv.exclude.MatchString(name)
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
func (inv *Inventory) vdiskRows(all []veil.Vdisk) ([]vdiskRow, map[string]float64) {
	rows := make([]vdiskRow, 0, len(all))
	pools := map[string]float64{}
	for i := range all {
		v := &all[i]
		r := vdiskRow{id: v.ID, name: v.VerboseName, status: v.Status, datapoolID: v.Datapool.ID,
			bus: v.TargetBus, typ: v.DiskType, provisioned: bytesOf(v.VirtualSize), allocated: bytesOf(v.Size), snapshots: -1}
		if r.datapoolID != "" && r.provisioned >= 0 {
			pools[r.datapoolID] += r.provisioned
		}
		if v.Domain != nil && v.Domain.ID != "" {
			r.domainID, r.domain = v.Domain.ID, v.Domain.VerboseName
			if !inv.keepDomain(r.domain) {
				continue
			}
		}
		if v.Snapshots != nil {
			r.snapshots = len(v.Snapshots)
		}
		rows = append(rows, r)
	}
	return rows, pools
}

// ifaceRows keeps the interfaces of the VMs domain_include/exclude select.
func (inv *Inventory) ifaceRows(all []veil.VMachineInf) []ifaceRow {
	rows := make([]ifaceRow, 0, len(all))
	for i := range all {
		v := &all[i]
		if v.Domain == nil || v.Domain.ID == "" || !inv.keepDomain(deviceDomainName(v.Domain, v.DomainName)) {
			continue // an interface of no VM names nothing to join on
		}
		r := ifaceRow{id: v.ID, name: v.Name, domainID: v.Domain.ID, mac: strings.ToLower(v.MACAddress), driver: v.NICDriver, up: -1}
		if v.Network != nil {
			r.networkID, r.network = v.Network.ID, v.Network.VerboseName
		}
		r.up = linkUp(v.LinkState)
		rows = append(rows, r)
	}
	return rows
}

// emitDevices sends the device families of the snapshot, one family after the other. Disks and
// interfaces are listed every collect.resync_interval only: those of a VM the domains no longer
// list (deleted since, by a refresh or a push) are left out, not exported with a stale VM.
func (inv *Inventory) emitDevices(e emitter, snap snapshot) {
	d := inv.descs
	// Nothing they are made of changed since the last render (a push changed a VM's power,
	// say): its families are kept as they are, which halves a render at 10,000 VMs.
	if e.b != nil && e.prev != nil && inv.devicesRendered && snap.devicesGen == inv.renderedDevicesGen {
		for _, f := range []*exposition.Desc{d.vdiskInfo, d.vdiskProvisioned, d.vdiskAllocated, d.vdiskSnapshots, d.datapoolProvisioned, d.ifaceInfo, d.ifaceUp} {
			e.b.Keep(e.prev, f)
		}
		return
	}
	if e.b != nil {
		inv.devicesRendered, inv.renderedDevicesGen = true, snap.devicesGen
	}
	gauge := e.gauge
	gone := func(string) bool { return false }
	if snap.domainsGen > 0 {
		live := make(map[string]struct{}, len(snap.domains))
		for i := range snap.domains {
			live[snap.domains[i].ID] = struct{}{}
		}
		gone = func(id string) bool {
			_, ok := live[id]
			return id != "" && !ok
		}
	}
	if snap.vdisks != nil {
		// Rows are passed by value: a pointer to the row with its detail would escape, one
		// allocation per disk and family.
		each := func(f func(r vdiskRow)) {
			for i := range snap.vdisks {
				if r := snap.vdisks[i].withDetail(snap.details); !gone(r.domainID) {
					f(r)
				}
			}
			e.flush()
		}
		each(func(r vdiskRow) {
			gauge(d.vdiskInfo, 1, r.id, r.name, r.domainID, r.domain, r.datapoolID, r.status, r.bus, r.typ)
		})
		each(func(r vdiskRow) {
			if r.provisioned >= 0 {
				gauge(d.vdiskProvisioned, r.provisioned, r.id, r.domainID, r.datapoolID)
			}
		})
		each(func(r vdiskRow) {
			if r.allocated >= 0 {
				gauge(d.vdiskAllocated, r.allocated, r.id, r.domainID, r.datapoolID)
			}
		})
		each(func(r vdiskRow) {
			if r.snapshots >= 0 {
				gauge(d.vdiskSnapshots, float64(r.snapshots), r.id, r.domainID, r.datapoolID)
			}
		})
		// Every known datapool, 0 without disks, and any a disk names that the datapools
		// collection did not list.
		seen := make(map[string]bool, len(snap.datapools))
		for i := range snap.datapools {
			id := snap.datapools[i].ID
			seen[id] = true
			gauge(d.datapoolProvisioned, snap.poolProvisioned[id], id)
		}
		for id, v := range snap.poolProvisioned {
			if !seen[id] {
				gauge(d.datapoolProvisioned, v, id)
			}
		}
		e.flush()
	}
	if snap.interfaces != nil {
		for i := range snap.interfaces {
			if r := &snap.interfaces[i]; !gone(r.domainID) {
				gauge(d.ifaceInfo, 1, r.domainID, r.id, r.name, r.mac, r.driver, r.networkID, r.network)
			}
		}
		e.flush()
		for i := range snap.interfaces {
			if r := snap.interfaces[i].withDetail(snap.details); r.up >= 0 && !gone(r.domainID) {
				gauge(d.ifaceUp, float64(r.up), r.domainID, r.id)
			}
		}
		e.flush()
	}
}
