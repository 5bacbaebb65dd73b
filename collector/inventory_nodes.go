package collector

// The node families of a snapshot, and what a render keeps of the last one's: a node a push
// changed (its running VMs counted again when one of them powered on) changes the series of
// that node in the families it differs in, the blocks holding them patched, not the 500 nodes'
// eight families rendered again.

import (
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// nodeFamily is a node family: its series of a node, and whether two versions of a node have
// the same series in it (every field emit reads, compared).
type nodeFamily struct {
	desc *exposition.Desc
	emit func(e exposition.Sink, n *veil.Node)
	same func(a, b *veil.Node) bool
}

// nodeFamilies are the node families.
func (d *inventoryDescs) nodeFamilies() []nodeFamily {
	return []nodeFamily{
		{d.nodeInfo, func(e exposition.Sink, n *veil.Node) {
			e.Add(d.nodeInfo, 1, n.ID, n.VerboseName, n.Cluster.VerboseName, n.ManagementIP)
		},
			func(a, b *veil.Node) bool {
				return a.VerboseName == b.VerboseName && a.Cluster.VerboseName == b.Cluster.VerboseName && a.ManagementIP == b.ManagementIP
			}},
		{d.nodeStatus, func(e exposition.Sink, n *veil.Node) { e.Add(d.nodeStatus, 1, n.ID, n.Status) },
			func(a, b *veil.Node) bool { return a.Status == b.Status }},
		{d.nodeCPUs, func(e exposition.Sink, n *veil.Node) { e.Add(d.nodeCPUs, float64(n.CPUCount), n.ID) },
			func(a, b *veil.Node) bool { return a.CPUCount == b.CPUCount }},
		{d.nodeMemory, func(e exposition.Sink, n *veil.Node) { e.Add(d.nodeMemory, float64(n.MemoryCount)*mib, n.ID) },
			func(a, b *veil.Node) bool { return a.MemoryCount == b.MemoryCount }},
		{d.nodeCPUUsage, func(e exposition.Sink, n *veil.Node) {
			if n.CPUUsedPercentUser != nil {
				e.Add(d.nodeCPUUsage, float64(*n.CPUUsedPercentUser)/100, n.ID)
			}
		}, func(a, b *veil.Node) bool { return sameNumber(a.CPUUsedPercentUser, b.CPUUsedPercentUser) }},
		{d.nodeMemUsage, func(e exposition.Sink, n *veil.Node) {
			if n.MemUsedPercentUser != nil {
				e.Add(d.nodeMemUsage, float64(*n.MemUsedPercentUser)/100, n.ID)
			}
		}, func(a, b *veil.Node) bool { return sameNumber(a.MemUsedPercentUser, b.MemUsedPercentUser) }},
		{d.nodeDomains, func(e exposition.Sink, n *veil.Node) { e.Add(d.nodeDomains, float64(n.DomainsCount), n.ID) },
			func(a, b *veil.Node) bool { return a.DomainsCount == b.DomainsCount }},
		{d.nodeDomainsRunning, func(e exposition.Sink, n *veil.Node) { e.Add(d.nodeDomainsRunning, float64(n.DomainsOnCount), n.ID) },
			func(a, b *veil.Node) bool { return a.DomainsOnCount == b.DomainsOnCount }},
	}
}

// emitNodes sends the node families. With shown (the last render showed prev, its nodes) a
// family no node changed in is kept as rendered and one few changed in patched: the changed
// nodes' old series removed, their new ones added.
func (d *inventoryDescs) emitNodes(e exposition.Sink, snap *inventory.Snapshot, prev []*veil.Node, shown bool) {
	fams := d.nodeFamilies()
	var changes []nodeChange
	if shown {
		changes = diffNodes(prev, snap.Nodes, fams)
	}
	for k, f := range fams {
		if kept, patched := (changeSet[veil.Node]{changes, len(snap.Nodes), shown}).keepOrPatch(e, f.desc, f.emit, k); kept || patched {
			continue
		}
		for _, n := range snap.Nodes {
			f.emit(e, n)
		}
	}
}

// nodeChange is a node that changed since the last render (fams: bits of nodeFamilies).
type nodeChange = change[veil.Node]

// diffNodes lists the nodes that differ between prev and cur. A push replaces a node where it
// is, so the two are most often the same ids in the same order, compared pair by pair (a node
// no push or listing replaced is its pointer); otherwise they are matched by id.
func diffNodes(prev, cur []*veil.Node, fams []nodeFamily) []nodeChange {
	const all = ^uint32(0)
	changed := func(a, b *veil.Node) uint32 {
		var m uint32
		if a == b {
			return 0
		}
		for k, f := range fams {
			if !f.same(a, b) {
				m |= 1 << k
			}
		}
		return m
	}
	var out []nodeChange
	aligned := len(prev) == len(cur)
	for i := 0; aligned && i < len(cur); i++ {
		aligned = prev[i].ID == cur[i].ID
	}
	if aligned {
		for i := range cur {
			if m := changed(prev[i], cur[i]); m != 0 {
				out = append(out, nodeChange{prev[i], cur[i], m})
			}
		}
		return out
	}
	was := make(map[string]*veil.Node, len(prev))
	for _, n := range prev {
		was[n.ID] = n
	}
	for _, n := range cur {
		switch old, ok := was[n.ID]; {
		case !ok:
			out = append(out, nodeChange{now: n, fams: all})
		default:
			delete(was, n.ID)
			if m := changed(old, n); m != 0 {
				out = append(out, nodeChange{old, n, m})
			}
		}
	}
	for _, old := range was {
		out = append(out, nodeChange{old: old, fams: all})
	}
	return out
}
