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
				(a.Parent == b.Parent || a.Parent != nil && b.Parent != nil && a.Parent.ID == b.Parent.ID) &&
				(sameBacking(a.Tags, b.Tags) || slices.EqualFunc(a.Tags, b.Tags, func(x, y veil.Tag) bool { return x.Name == y.Name }))
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
			return a.GuestUtils.Hostname == b.GuestUtils.Hostname && (sameBacking(a.GuestUtils.IPv4, b.GuestUtils.IPv4) ||
				len(a.GuestUtils.IPv4) > 0 == (len(b.GuestUtils.IPv4) > 0) && firstIP(&a.GuestUtils) == firstIP(&b.GuestUtils))
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

// The comparisons look at what a pointer or slice refers to only when the two differ: a VM
// no push touched is a copy of the last render's, sharing them, and reading them for each of
// 10,000 VMs was most of a render's comparing (a cache miss each).

// sameNumber says whether two optional numbers are both absent or equal.
func sameNumber(a, b *veil.Number) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// sameBacking says whether two slices are the same memory: then their elements are equal.
func sameBacking[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// emitDomains sends the VM families, one after the other, each in the snapshot's order (by
// id: client_golang's, so no family is sorted again). With prev (the last render's VMs; nil on
// the live path) a family is kept as rendered when no VM changed in it, and patched when few
// did: their old series removed and their new ones added, so that a change costs what it
// changes. It says whether the VMs are those of the last render (none added or gone).
func (d *inventoryDescs) emitDomains(e exposition.Sink, snap *inventory.Snapshot, prev lastRender) (sameVMs bool) {
	fams := d.domainFamilies()
	changes, ok := prev.diff(&snap.Domains, fams)
	sameVMs = ok
	for _, c := range changes {
		sameVMs = sameVMs && c.old != nil && c.now != nil
	}
	for k, f := range fams {
		kept, patched := changeSet[veil.Domain]{changes, snap.Domains.Len(), ok}.keepOrPatch(e, f.desc, f.emit, k)
		if kept {
			continue
		}
		if patched {
			e.Flush()
			continue
		}
		for d := range snap.Domains.All() {
			f.emit(e, d)
		}
		e.Flush()
	}
	return sameVMs
}

// patchShare: a family is patched while at most 1/patchShare of the VMs changed in it, and
// emitted whole beyond (a refresh that moved every VM's usage): patching reads back and cuts
// again every block it touches.
const patchShare = 4

// domainChange is a VM that changed since the last render (fams: bits of domainFamilies).
type domainChange = change[veil.Domain]

// change is an object that changed since the last render: its version then (nil: it is new)
// and now (nil: it is gone), and the families it changed in, a bit each.
type change[T any] struct {
	old, now *T
	fams     uint32
}

// changeSet is what changed since the last render among total objects; usable says that the
// last render is what the changes are against.
type changeSet[T any] struct {
	changes []change[T]
	total   int
	usable  bool
}

// keepOrPatch renders family k from the changes alone where it can: kept when no object changed
// in it, patched when at most 1/patchShare of the total did (the changed objects' old series
// removed, their new ones added). Neither: the caller emits the family whole.
func (cs changeSet[T]) keepOrPatch(e exposition.Sink, desc *exposition.Desc, emit func(exposition.Sink, *T), k int) (kept, patched bool) {
	changes, total := cs.changes, cs.total
	if !cs.usable {
		return false, false
	}
	bit, n := uint32(1)<<k, 0
	for _, c := range changes {
		if c.fams&bit != 0 {
			n++
		}
	}
	if n == 0 && e.Keep(desc) {
		return true, false
	}
	if n > total/patchShare || !e.Patch(desc) {
		return false, false
	}
	rm := e.Removing()
	for _, c := range changes {
		if c.fams&bit == 0 {
			continue
		}
		if c.old != nil {
			emit(rm, c.old)
		}
		if c.now != nil {
			emit(e, c.now)
		}
	}
	return false, true
}

// lastRender is what the last render was made of, for a render to keep or patch what did not
// change since (the zero lastRender: nothing to keep): its VMs, and the ids of those pushes
// changed since, when known (Snapshot.DomainsChangedSince).
type lastRender struct {
	vms     *inventory.VMs // nil: none, or not to compare with
	changed []string
	known   bool
	// backupsShown says the last render showed the backups, made at backupsGen.
	backupsShown bool
	backupsGen   uint64
	// The nodes, clusters and datapools it showed: a snapshot's slices are never changed once
	// stored (a push copies one at its first edit), so the same memory is the same contents.
	nodes    []*veil.Node
	clusters []veil.Cluster
	pools    []veil.Datapool
	hosts    bool // it showed them
}

// diff lists the VMs that differ between the last render's and cur: those pushes changed
// when they are known (a binary search each, whatever the inventory's size), otherwise every
// VM compared (diffDomains). False when there is nothing to compare with.
func (p lastRender) diff(cur *inventory.VMs, fams []domainFamily) ([]domainChange, bool) {
	if p.vms == nil {
		return nil, false
	}
	if !p.known || len(p.changed) > cur.Len()/patchShare {
		// Every VM compared: rare (after a listing), so the lists are walked as slices.
		return diffDomains(p.vms.Slice(), cur.Slice(), fams)
	}
	ids := slices.Clone(p.changed)
	slices.Sort(ids)
	var out []domainChange
	for _, id := range slices.Compact(ids) {
		was, wasOK := p.vms.Find(id)
		is, isOK := cur.Find(id)
		switch {
		case wasOK && isOK:
			if m := familiesChanged(was, is, fams); m != 0 {
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

// familiesChanged has a bit set for each family a and b differ in: none when they are the same
// VM (a snapshot's VMs are never modified, so a VM no push or listing replaced is its pointer).
func familiesChanged(a, b *veil.Domain, fams []domainFamily) uint32 {
	if a == b {
		return 0
	}
	var m uint32
	for k, f := range fams {
		if !f.same(a, b) {
			m |= 1 << k
		}
	}
	return m
}

// diffDomains lists the VMs that differ between prev and cur, both sorted by id, in one pass
// (the VMs of 10,000 are megabytes: one pass per family was most of a render's comparing).
// False without prev, or when either is not sorted by id: then there is nothing to keep.
func diffDomains(prev, cur []*veil.Domain, fams []domainFamily) ([]domainChange, bool) {
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
			if m := familiesChanged(prev[i], cur[j], fams); m != 0 {
				out = append(out, domainChange{old: prev[i], now: cur[j], fams: m})
			}
			i, j = i+1, j+1
		}
	}
	return out, true
}
