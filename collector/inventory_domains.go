package collector

// The VM families of a snapshot, one after the other, each with what it shows of a VM: a
// family whose series show the VMs of the last render alike (a push changed one VM's power, and
// the other families show nothing of it) is kept as rendered, neither formatted nor sorted,
// hashed or compressed again.

import (
	"slices"
	"strconv"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// domainFamily is a VM family: its series of a VM, and whether two versions of a VM have the
// same series in it (every field emit reads, compared; a field left out would keep a stale
// series).
type domainFamily struct {
	desc *exposition.Desc
	emit func(e exposition.Sink, v *veil.Domain)
	same func(a, b *veil.Domain) bool
}

// domainFamilies are the VM families in the order they are sent.
func (d *inventoryDescs) domainFamilies() []domainFamily {
	return []domainFamily{
		{d.domainInfo, func(e exposition.Sink, v *veil.Domain) {
			parent := ""
			if v.Parent != nil {
				parent = v.Parent.ID
			}
			e.Add(d.domainInfo, 1, v.ID, v.VerboseName, v.Node.ID, strconv.FormatBool(v.Template), strconv.FormatBool(v.Thin), parent, inventory.TagNames(v.Tags))
		}, func(a, b *veil.Domain) bool {
			return a.VerboseName == b.VerboseName && a.Node.ID == b.Node.ID && a.Template == b.Template && a.Thin == b.Thin &&
				(a.Parent == nil) == (b.Parent == nil) && (a.Parent == nil || a.Parent.ID == b.Parent.ID) &&
				slices.EqualFunc(a.Tags, b.Tags, func(x, y veil.Tag) bool { return x.Name == y.Name })
		}},
		{d.domainStatus, func(e exposition.Sink, v *veil.Domain) { e.Add(d.domainStatus, 1, v.ID, v.Status) },
			func(a, b *veil.Domain) bool { return a.Status == b.Status }},
		{d.domainPower, func(e exposition.Sink, v *veil.Domain) { e.Add(d.domainPower, 1, v.ID, powerState(v.UserPowerState)) },
			func(a, b *veil.Domain) bool { return powerState(a.UserPowerState) == powerState(b.UserPowerState) }},
		{d.domainCPUs, func(e exposition.Sink, v *veil.Domain) { e.Add(d.domainCPUs, float64(v.CPUCount), v.ID) },
			func(a, b *veil.Domain) bool { return a.CPUCount == b.CPUCount }},
		{d.domainMemory, func(e exposition.Sink, v *veil.Domain) { e.Add(d.domainMemory, float64(v.MemoryCount)*mib, v.ID) },
			func(a, b *veil.Domain) bool { return a.MemoryCount == b.MemoryCount }},
		{d.domainCPUUsage, func(e exposition.Sink, v *veil.Domain) {
			if v.CPUUsedPercentUser != nil {
				e.Add(d.domainCPUUsage, float64(*v.CPUUsedPercentUser)/100, v.ID)
			}
		}, func(a, b *veil.Domain) bool { return sameNumber(a.CPUUsedPercentUser, b.CPUUsedPercentUser) }},
		{d.domainMemUsage, func(e exposition.Sink, v *veil.Domain) {
			if v.MemUsedPercentUser != nil {
				e.Add(d.domainMemUsage, float64(*v.MemUsedPercentUser)/100, v.ID)
			}
		}, func(a, b *veil.Domain) bool { return sameNumber(a.MemUsedPercentUser, b.MemUsedPercentUser) }},
		{d.domainAgent, func(e exposition.Sink, v *veil.Domain) {
			e.Add(d.domainAgent, metricutil.Bool(v.GuestUtils.QemuState), v.ID)
		},
			func(a, b *veil.Domain) bool { return a.GuestUtils.QemuState == b.GuestUtils.QemuState }},
		{d.domainGuestInfo, func(e exposition.Sink, v *veil.Domain) {
			if g := &v.GuestUtils; g.Hostname != "" || len(g.IPv4) > 0 {
				e.Add(d.domainGuestInfo, 1, v.ID, g.Hostname, firstIP(g))
			}
		}, func(a, b *veil.Domain) bool {
			return a.GuestUtils.Hostname == b.GuestUtils.Hostname && len(a.GuestUtils.IPv4) > 0 == (len(b.GuestUtils.IPv4) > 0) &&
				firstIP(&a.GuestUtils) == firstIP(&b.GuestUtils)
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

// sameNumber says whether two optional numbers are both absent or equal.
func sameNumber(a, b *veil.Number) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// emitDomains sends the VM families, one after the other, each in the snapshot's order (by
// id: client_golang's, so no family is sorted again). A family that shows the VMs of prev (the
// last render's, nil on the live path) as it shows the snapshot's is kept as rendered.
func (d *inventoryDescs) emitDomains(e exposition.Sink, snap *inventory.Snapshot, prev []veil.Domain) {
	for _, f := range d.domainFamilies() {
		if prev != nil && sameDomains(prev, snap.Domains, f.same) && e.Keep(f.desc) {
			continue
		}
		for i := range snap.Domains {
			f.emit(e, &snap.Domains[i])
		}
		e.Flush()
	}
}

// sameDomains says whether a and b list the same VMs, each alike by same.
func sameDomains(a, b []veil.Domain, same func(a, b *veil.Domain) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !same(&a[i], &b[i]) {
			return false
		}
	}
	return true
}
