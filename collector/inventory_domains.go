package collector

// The VM families, each declared once, and a snapshot's, one after the other: a family whose
// series of the VMs of the last render are alike (a push changed one VM's power, and the other
// families' series of it are the same) is kept as rendered, neither formatted nor sorted,
// hashed or compressed again.

import (
	"slices"
	"strconv"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// domainFamilies are the VM families in the order they are sent; patched VM by VM on a pushed
// change: small blocks.
func domainFamilies(d gaugeDesc) []family[veil.Domain] {
	return []family[veil.Domain]{
		{d("domain_info", "VM description; value 1; tags are the VM's tag names, sorted and joined by commas.", "domain_id", "domain", "node_id", "template", "thin", "parent_id", "tags").SmallBlocks(),
			func(v *veil.Domain, s *sample) {
				parent := ""
				if v.Parent != nil {
					parent = v.Parent.ID
				}
				s.set(1, v.ID, v.VerboseName, v.Node.ID, strconv.FormatBool(v.Template), strconv.FormatBool(v.Thin), parent, inventory.TagNames(v.Tags))
			}},
		{d("domain_status", "Current status of the VM; value 1.", "domain_id", "status").SmallBlocks(),
			func(v *veil.Domain, s *sample) { s.set(1, v.ID, v.Status) }},
		{d("domain_power_state", "Current power state of the VM (undefined, off, suspended, on); value 1.", "domain_id", "state").SmallBlocks(),
			func(v *veil.Domain, s *sample) { s.set(1, v.ID, powerState(v.UserPowerState)) }},
		{d("domain_cpus", "vCPUs of the VM.", "domain_id").SmallBlocks(),
			func(v *veil.Domain, s *sample) { s.set(float64(v.CPUCount), v.ID) }},
		{d("domain_memory_bytes", "Memory of the VM.", "domain_id").SmallBlocks(),
			func(v *veil.Domain, s *sample) { s.set(float64(v.MemoryCount)*mib, v.ID) }},
		{d("domain_cpu_usage_ratio", "CPU usage of the VM, 0..1, when the platform reports it.", "domain_id").SmallBlocks(),
			func(v *veil.Domain, s *sample) { setRatio(s, v.CPUUsedPercentUser, v.ID) }},
		{d("domain_memory_usage_ratio", "Memory usage of the VM, 0..1, when the platform reports it.", "domain_id").SmallBlocks(),
			func(v *veil.Domain, s *sample) { setRatio(s, v.MemUsedPercentUser, v.ID) }},
		{d("domain_guest_agent_connected", "1 if the QEMU guest agent of the VM answers the platform.", "domain_id").SmallBlocks(),
			func(v *veil.Domain, s *sample) { s.set(metricutil.Bool(v.GuestUtils.QemuState), v.ID) }},
		{d("domain_guest_info", "Hostname and primary IPv4 address the VM's guest agent reports to the platform (guest_utils of the VM list); value 1, only while the agent reports one of them.", "domain_id", "hostname", "ip").SmallBlocks(),
			func(v *veil.Domain, s *sample) {
				if g := &v.GuestUtils; g.Hostname != "" || len(g.IPv4) > 0 {
					s.set(1, v.ID, g.Hostname, firstIP(g))
				}
			}},
	}
}

// firstIP is the guest's primary address: the platform lists it first.
func firstIP(g *veil.GuestUtils) string {
	if len(g.IPv4) > 0 {
		return g.IPv4[0]
	}
	return ""
}

// emitDomains sends the VM families, one after the other, each in the snapshot's order (by
// id: client_golang's, so no family is sorted again). With prev (the last render's snapshot;
// nil on the live path) a family is kept as rendered when no VM's series in it changed, and
// patched when few did: their old series removed and their new ones added, so that a change
// costs what it changes. It says whether the VMs are those of the last render (none added or
// gone).
func (f *inventoryFamilies) emitDomains(e exposition.Sink, snap, prev *inventory.Snapshot) (sameVMs bool) {
	changes, ok := diffDomains(prev, snap, f.domains)
	sameVMs = ok
	for _, c := range changes {
		sameVMs = sameVMs && c.old != nil && c.now != nil
	}
	s := new(sample)
	for k := range f.domains {
		fam := &f.domains[k]
		kept, patched := changeSet[veil.Domain]{changes, snap.Domains.Len(), ok}.keepOrPatch(e, fam, k, s)
		if kept {
			continue
		}
		if patched {
			e.Flush()
			continue
		}
		for d := range snap.Domains.All() {
			fam.add(e, d, s)
		}
		e.Flush()
	}
	return sameVMs
}

// domainChange is a VM that changed since the last render (fams: bits of the VM families).
type domainChange = change[veil.Domain]

// diffDomains lists the VMs whose series differ between prev's and cur's: those pushes changed
// since prev when they are known (a binary search each, whatever the inventory's size),
// otherwise every VM compared (diffAllDomains). False when there is nothing to compare with
// (no last render, or the domains never listed: nothing to tell from its none).
func diffDomains(prev, cur *inventory.Snapshot, fams []family[veil.Domain]) ([]domainChange, bool) {
	if prev == nil || cur.DomainsGen == 0 {
		return nil, false
	}
	d := newDiffer(fams)
	changed, known := cur.DomainsChangedSince(prev.DomainsGen)
	if !known || len(changed) > cur.Domains.Len()/patchShare {
		// Every VM compared: rare (after a listing), so the lists are walked as slices.
		return diffAllDomains(prev.Domains.Slice(), cur.Domains.Slice(), d)
	}
	ids := slices.Clone(changed)
	slices.Sort(ids)
	var out []domainChange
	for _, id := range slices.Compact(ids) {
		was, wasOK := prev.Domains.Find(id)
		is, isOK := cur.Domains.Find(id)
		switch {
		case wasOK && isOK:
			if m := d.changed(was, is, [2]string{was.ID, is.ID}); m != 0 {
				out = append(out, domainChange{old: was, now: is, fams: m})
			}
		case wasOK:
			out = append(out, domainChange{old: was, fams: ^uint32(0)})
		case isOK:
			out = append(out, domainChange{now: is, fams: ^uint32(0)})
		}
	}
	return out, true
}

// diffAllDomains lists the VMs that differ between prev and cur, both sorted by id, in one pass
// (the VMs of 10,000 are megabytes: one pass per family was most of a render's comparing).
// False without prev, or when either is not sorted by id: then there is nothing to keep.
func diffAllDomains(prev, cur []*veil.Domain, d *differ[veil.Domain]) ([]domainChange, bool) {
	if prev == nil {
		return nil, false
	}
	const all = ^uint32(0)
	var out []domainChange
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		if i > 0 && i < len(prev) && prev[i-1].ID >= prev[i].ID || j > 0 && j < len(cur) && cur[j-1].ID >= cur[j].ID {
			return nil, false
		}
		switch {
		case j == len(cur) || i < len(prev) && prev[i].ID < cur[j].ID:
			out = append(out, domainChange{old: prev[i], fams: all})
			i++
		case i == len(prev) || cur[j].ID < prev[i].ID:
			out = append(out, domainChange{now: cur[j], fams: all})
			j++
		default:
			if m := d.changed(prev[i], cur[j], [2]string{prev[i].ID, cur[j].ID}); m != 0 {
				out = append(out, domainChange{old: prev[i], now: cur[j], fams: m})
			}
			i, j = i+1, j+1
		}
	}
	return out, true
}
