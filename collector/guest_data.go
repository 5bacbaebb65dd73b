package collector

// What the guest checker keeps of a guest's filesystems and network interfaces: only the
// numbers its series need, filtered once when the answer arrives, so a render builds nothing
// but the series themselves.

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/veil-exporter/veil-exporter/veil"
)

type guestFS struct {
	mountpoint, fstype, device string
	size, used                 float64
}

// guestFilesystems keeps the entries with sizes whose type and mount point are not excluded,
// once per (mountpoint, type, device) so that repeated mounts cannot make duplicate series.
// Mount points matter on guests that are Kubernetes nodes: every pod's volumes are bind mounts.
func guestFilesystems(list []veil.GuestFilesystem, typesOut []string, mountsOut *regexp.Regexp) []guestFS {
	out := make([]guestFS, 0, len(list))
	seen := make(map[[3]string]bool, len(list))
	for _, f := range list {
		if f.TotalBytes == nil || f.UsedBytes == nil || slices.Contains(typesOut, f.Type) ||
			mountsOut != nil && mountsOut.MatchString(f.Mountpoint) {
			continue
		}
		k := [3]string{f.Mountpoint, f.Type, f.Name}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, guestFS{mountpoint: f.Mountpoint, fstype: f.Type, device: f.Name,
			size: float64(*f.TotalBytes), used: float64(*f.UsedBytes)})
	}
	return out
}

// The counters of guest-network-get-interfaces, in the order of guestDescs.net.
const (
	nicRxBytes = iota
	nicRxPackets
	nicRxErrors
	nicRxDrop
	nicTxBytes
	nicTxPackets
	nicTxErrors
	nicTxDrop
	nicCounters
)

// guestNIC is one interface of a guest: its name and its counters.
type guestNIC struct {
	name     string
	counters [nicCounters]float64
}

// guestInterfaces keeps the interfaces that report statistics and whose name is not excluded,
// once per name.
func guestInterfaces(list []veil.GuestNetworkInterface, out *regexp.Regexp) []guestNIC {
	nics := make([]guestNIC, 0, len(list))
	for _, n := range list {
		if n.Statistics == nil || n.Name == "" || out != nil && out.MatchString(n.Name) {
			continue
		}
		if slices.ContainsFunc(nics, func(x guestNIC) bool { return x.name == n.Name }) {
			continue
		}
		s := n.Statistics
		nics = append(nics, guestNIC{
			name: n.Name,
			counters: [nicCounters]float64{
				float64(s.RxBytes), float64(s.RxPackets), float64(s.RxErrs), float64(s.RxDropped),
				float64(s.TxBytes), float64(s.TxPackets), float64(s.TxErrs), float64(s.TxDropped),
			},
		})
	}
	// By name, the order of their series: a render need not sort them.
	slices.SortFunc(nics, func(a, b guestNIC) int { return strings.Compare(a.name, b.name) })
	return nics
}

// guestIPv6 returns the first IPv6 address, in the guest's order, of an interface whose name is
// not excluded that a scraper could reach: global unicast (ULA included), never link-local
// (fe80::/10, which needs a zone), loopback, multicast or an IPv4-mapped address; "" if none.
func guestIPv6(list []veil.GuestNetworkInterface, out *regexp.Regexp) string {
	for _, n := range list {
		if out != nil && out.MatchString(n.Name) {
			continue
		}
		for _, a := range n.IPAddresses {
			if a.Type != "ipv6" {
				continue
			}
			if ip, ok := ScrapableIP(a.Address); ok && ip.Is6() {
				return ip.String()
			}
		}
	}
	return ""
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
