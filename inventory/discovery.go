package inventory

// What HTTP service discovery of guests (/sd/domains) reads of one controller: the VMs a
// Prometheus may scrape, from the cached inventory, and the operating systems the guest checker
// learned. Nothing here calls the controller.

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

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

// GuestTargets returns the VMs of the snapshot that service discovery lists, sorted by id,
// made once per snapshot (the filtering and the sort are paid once per change, not once per
// request). The slice is shared: callers must not modify it.
func (s *Snapshot) GuestTargets() []GuestTarget {
	s.targets.once.Do(func() { s.targets.v = guestTargets(s.Domains, s.Nodes) })
	return s.targets.v
}

func guestTargets(doms VMs, nodes []*veil.Node) []GuestTarget {
	var nodeNames map[string]string // made only if a VM lacks its node's name
	out := make([]GuestTarget, 0, doms.Len())
	for d := range doms.All() {
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
		if t := TagNames(d.Tags); t != "" {
			tags = "," + t + ","
		}
		out = append(out, GuestTarget{Domain: d, IPv4: ipv4, IPv6: ipv6, Node: node, Tags: tags, Ports: portTags(d.Tags)})
	}
	slices.SortFunc(out, func(a, b GuestTarget) int { return cmp.Compare(a.Domain.ID, b.Domain.ID) })
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

// TagNames is the VM's tag names sorted and joined by commas (veil_domain_info's tags label).
func TagNames(tags []veil.Tag) string {
	switch len(tags) {
	case 0:
		return ""
	case 1:
		return tags[0].Name
	}
	names := make([]string, 0, len(tags))
	for _, t := range tags {
		if t.Name != "" {
			names = append(names, t.Name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// ScrapableIP parses an address a guest reports and tells whether a scraper could use it as a
// target: global unicast (private ranges and IPv6 ULA included), not link-local (IPv4
// 169.254/16, IPv6 fe80::/10), loopback, multicast, unspecified or with a zone. IPv4-mapped
// IPv6 addresses read as IPv4.
func ScrapableIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	ip = ip.Unmap()
	return ip, ip.IsGlobalUnicast()
}
