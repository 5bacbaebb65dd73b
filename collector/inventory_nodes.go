package collector

// The node families, each declared once, and what a render keeps of the last one's: a node a
// push changed (its running VMs counted again when one of them powered on) changes the series
// of that node in the families whose series of it differ, the blocks holding them patched, not
// the 500 nodes' eight families rendered again.

import (
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// nodeFamilies are the node families.
func nodeFamilies(d gaugeDesc) []family[veil.Node] {
	// Patched node by node on a pushed change: small blocks.
	return []family[veil.Node]{
		{d("node_info", "Node description; value 1.", "node_id", "node", "cluster", "management_ip").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(1, n.ID, n.VerboseName, n.Cluster.VerboseName, n.ManagementIP) }},
		{d("node_status", "Current status of the node; value 1.", "node_id", "status").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(1, n.ID, n.Status) }},
		{d("node_cpus", "CPUs of the node.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(float64(n.CPUCount), n.ID) }},
		{d("node_memory_bytes", "Memory of the node.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(float64(n.MemoryCount)*mib, n.ID) }},
		{d("node_cpu_usage_ratio", "CPU usage of the node, 0..1.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { setRatio(s, n.CPUUsedPercentUser, n.ID) }},
		{d("node_memory_usage_ratio", "Memory usage of the node, 0..1.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { setRatio(s, n.MemUsedPercentUser, n.ID) }},
		{d("node_domains", "VMs on the node.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(float64(n.DomainsCount), n.ID) }},
		{d("node_domains_running", "Running VMs on the node.", "node_id").SmallBlocks(),
			func(n *veil.Node, s *sample) { s.set(float64(n.DomainsOnCount), n.ID) }},
	}
}

// emitNodes sends the node families. With prev (the last render's snapshot) a family no node
// changed in is kept as rendered and one few changed in patched: the changed nodes' old
// series removed, their new ones added.
func (f *inventoryFamilies) emitNodes(e exposition.Sink, snap, prev *inventory.Snapshot) {
	var changes []nodeChange
	s := new(sample)
	if prev != nil {
		changes = diffNodes(prev.Nodes, snap.Nodes, f.nodes)
	}
	for k := range f.nodes {
		fam := &f.nodes[k]
		if kept, patched := (changeSet[veil.Node]{changes, len(snap.Nodes), prev != nil}).keepOrPatch(e, fam, k, s); kept || patched {
			continue
		}
		for _, n := range snap.Nodes {
			fam.add(e, n, s)
		}
	}
}

// nodeChange is a node that changed since the last render (fams: bits of the node families).
type nodeChange = change[veil.Node]

// diffNodes lists the nodes that differ between prev and cur. A push replaces a node where it
// is, so the two are most often the same ids in the same order, compared pair by pair (a node
// no push or listing replaced is its pointer); otherwise they are matched by id.
func diffNodes(prev, cur []*veil.Node, fams []family[veil.Node]) []nodeChange {
	const all = ^uint32(0)
	d := newDiffer(fams)
	changed := func(a, b *veil.Node) uint32 { return d.changed(a, b, [2]string{a.ID, b.ID}) }
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
