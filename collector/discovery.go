package collector

// What HTTP service discovery of guests (/sd/domains) reads of one controller: the VMs a
// Prometheus may scrape, from the cached inventory, and the operating systems the guest checker
// learned. Nothing here calls the controller.

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/veil-exporter/veil-exporter/veil"
)

// GuestTarget is a VM service discovery may list: on and not a template. Which of its
// addresses is the target is the request's choice (/sd/domains?family=).
type GuestTarget struct {
	Domain *veil.Domain // in the inventory snapshot: never modify it
	// IPv4 is the primary address: the first of guest_utils.ipv4 (the platform lists the primary
	// first) that a scraper can reach (ScrapableIP: not link-local, loopback, ...); "" if none.
	IPv4 string
	// IPv6 is an IPv6 address guest_utils.ipv4 lists (the platform's list is meant for IPv4;
	// the guest checker's guest-network-get-interfaces is the usual source); "" if none.
	IPv6 string
	Node string // the node's name, from the VM or else from the node list
	// Tags are the tag names sorted and written as other service discoveries write lists,
	// ",a,b,", so that a relabelling regex can match ".*,prod,.*"; "" without tags.
	Tags string
	// Ports are the ports of the VM's port tags (PortTagPrefix), in ascending order without
	// repeats; nil without one.
	Ports []string
}

// PortTagPrefix starts the name of a tag that sets a VM's scrape port: "port:9100". A VM with
// several has one target per port; a tag whose port is not a number 1-65535 is ignored.
const PortTagPrefix = "port:"

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
		if int(d.UserPowerState) != veil.PowerOn || d.Template || d.ID == "" {
			continue
		}
		var ipv4, ipv6 string
		for _, a := range d.GuestUtils.IPv4 {
			ip, ok := ScrapableIP(a)
			switch {
			case !ok:
			case ip.Is4() && ipv4 == "":
				ipv4 = ip.String()
			case ip.Is6() && ipv6 == "":
				ipv6 = ip.String()
			}
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
		out = append(out, GuestTarget{Domain: d, IPv4: ipv4, IPv6: ipv6, Node: node, Tags: tags, Ports: portTags(d.Tags)})
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

// portTags returns the ports of the port tags among tags (PortTagPrefix), ascending, once each.
func portTags(tags []veil.Tag) []string {
	var ports []int
	for _, t := range tags {
		p, ok := strings.CutPrefix(t.Name, PortTagPrefix)
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(p); err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p {
			ports = append(ports, n)
		}
	}
	if len(ports) == 0 {
		return nil
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	out := make([]string, len(ports))
	for i, n := range ports {
		out[i] = strconv.Itoa(n)
	}
	return out
}

// GuestIPv6 returns the IPv6 address guest-network-get-interfaces last reported for each VM the
// checker holds one for (ScrapableIP, never link-local). The map is the caller's.
func (g *GuestChecker) GuestIPv6() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string)
	for id, v := range g.vms {
		if v.ipv6 != "" && !v.unsupported && !v.gone {
			out[id] = v.ipv6
		}
	}
	return out
}
