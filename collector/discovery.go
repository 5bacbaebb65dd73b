package collector

// What HTTP service discovery of guests (/sd/domains) reads of one controller: the VMs a
// Prometheus may scrape, from the cached inventory, and the operating systems the guest checker
// learned. Nothing here calls the controller.

import (
	"cmp"
	"slices"
	"sync"

	"github.com/veil-exporter/veil-exporter/veil"
)

// GuestTarget is a VM service discovery lists: on, not a template, and its guest agent reports
// an IPv4 address to the platform.
type GuestTarget struct {
	Domain *veil.Domain // in the inventory snapshot: never modify it
	IPv4   string       // primary address (the platform lists it first)
	Node   string       // the node's name, from the VM or else from the node list
	// Tags are the tag names sorted and written as other service discoveries write lists,
	// ",a,b,", so that a relabelling regex can match ".*,prod,.*"; "" without tags.
	Tags string
}

// discoveryCache holds GuestTargets of one snapshot generation, so that the filtering and the
// sort by id are paid once per refresh, not once per request.
type discoveryCache struct {
	mu      sync.Mutex
	gen     uint64 // domainsGen the targets were made from; 0: none yet
	targets []GuestTarget
}

// GuestTargets returns the VMs of the latest snapshot that service discovery lists, sorted by
// id. The slice is shared: callers must not modify it.
func (inv *Inventory) GuestTargets() []GuestTarget {
	inv.mu.RLock()
	doms, nodes, gen := inv.snap.domains, inv.snap.nodes, inv.snap.domainsGen
	inv.mu.RUnlock()
	c := &inv.discovery
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || gen == 0 {
		c.gen, c.targets = gen, guestTargets(doms, nodes)
	}
	return c.targets
}

func guestTargets(doms []veil.Domain, nodes []veil.Node) []GuestTarget {
	var nodeNames map[string]string // made only if a VM lacks its node's name
	out := make([]GuestTarget, 0, len(doms))
	for i := range doms {
		d := &doms[i]
		if int(d.UserPowerState) != veil.PowerOn || d.Template || d.ID == "" || len(d.GuestUtils.IPv4) == 0 || d.GuestUtils.IPv4[0] == "" {
			continue
		}
		node := d.Node.VerboseName
		if node == "" && d.Node.ID != "" {
			if nodeNames == nil {
				nodeNames = make(map[string]string, len(nodes))
				for _, n := range nodes {
					nodeNames[n.ID] = n.VerboseName
				}
			}
			node = nodeNames[d.Node.ID]
		}
		tags := ""
		if t := tagsLabel(d.Tags); t != "" {
			tags = "," + t + ","
		}
		out = append(out, GuestTarget{Domain: d, IPv4: d.GuestUtils.IPv4[0], Node: node, Tags: tags})
	}
	slices.SortFunc(out, func(a, b GuestTarget) int { return cmp.Compare(a.Domain.ID, b.Domain.ID) })
	return out
}

// OSIDs returns the os_id guest-get-osinfo answered for each VM the checker holds one for (the
// checker forgets it when the agent stops answering or reconnects). The map is the caller's.
func (g *GuestChecker) OSIDs() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string, len(g.vms))
	for id, v := range g.vms {
		if v.os != nil && v.os.ID != "" && !v.unsupported && !v.gone {
			out[id] = v.os.ID
		}
	}
	return out
}
