package guest

// What the guest checker keeps of a guest's filesystems and network interfaces: only the
// numbers its series need, filtered once when the answer arrives, so a render builds nothing
// but the series themselves.

import (
	"regexp"
	"slices"
	"strings"

	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

type guestFS struct {
	mountpoint, fstype, device string
	size, used                 float64
}

// guestFilesystems keeps the entries with sizes whose type and mount point are not excluded,
// once per (mountpoint, type, device) so that repeated mounts cannot make duplicate series, at
// most maxGuestDevices of them (the first by mount point, type and device, the order of their
// series); cut is how many more there were. Mount points matter on guests that are Kubernetes
// nodes: every pod's volumes are bind mounts.
func guestFilesystems(list []veil.GuestFilesystem, typesOut []string, mountsOut *regexp.Regexp) (fs []guestFS, cut int) {
	out := make([]guestFS, 0, min(len(list), 4*maxGuestDevices))
	seen := make(map[[3]string]bool, min(len(list), 4*maxGuestDevices))
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
	slices.SortFunc(out, func(a, b guestFS) int {
		if c := strings.Compare(a.mountpoint, b.mountpoint); c != 0 {
			return c
		}
		if c := strings.Compare(a.fstype, b.fstype); c != 0 {
			return c
		}
		return strings.Compare(a.device, b.device)
	})
	return out[:min(len(out), maxGuestDevices)], max(len(out)-maxGuestDevices, 0)
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
// once per name (the first the guest lists), at most maxGuestDevices (the first by name).
func guestInterfaces(list []veil.GuestNetworkInterface, out *regexp.Regexp) []guestNIC {
	nics := make([]guestNIC, 0, min(len(list), 4*maxGuestDevices))
	seen := make(map[string]bool, min(len(list), 4*maxGuestDevices))
	for _, n := range list {
		if n.Statistics == nil || n.Name == "" || seen[n.Name] || out != nil && out.MatchString(n.Name) {
			continue
		}
		seen[n.Name] = true
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
	return nics[:min(len(nics), maxGuestDevices)]
}

// maxGuestDevices bounds the interfaces and the disks exported per guest (the first by name):
// their names come from the guest, and a host of containers or volumes can report hundreds.
const maxGuestDevices = 64

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
			if ip, ok := inventory.ScrapableIP(a.Address); ok && ip.Is6() {
				return ip.String()
			}
		}
	}
	return ""
}

// The counters of guest-get-diskstats kept, in the order of guestDescs.disk.
const (
	diskReadBytes = iota
	diskWrittenBytes
	diskReadsCompleted
	diskWritesCompleted
	diskReadTime
	diskWriteTime
	diskIOTime
	diskCounters
)

// guestDisk is one disk of a guest: its name and the counters it reported, in base units.
type guestDisk struct {
	name     string
	counters [diskCounters]float64
	has      uint8 // bit i: counters[i] was reported; the others have no series
}

// sectorBytes is the unit of the sector counts of /proc/diskstats, whatever the disk's own.
const sectorBytes = 512

// guestDisks keeps the disks whose name is not excluded, once per name, with the counters the
// guest reported: a counter it left out, or sent negative, has no series (never a 0).
func guestDisks(list []veil.GuestDiskStats, out *regexp.Regexp) []guestDisk {
	disks := make([]guestDisk, 0, min(len(list), 4*maxGuestDevices))
	seen := make(map[string]bool, min(len(list), 4*maxGuestDevices))
	for _, d := range list {
		if d.Name == "" || seen[d.Name] || out != nil && out.MatchString(d.Name) {
			continue
		}
		seen[d.Name] = true
		s := &d.Stats
		k := guestDisk{name: d.Name}
		for i, c := range [diskCounters]struct {
			v     *float64
			scale float64
		}{
			diskReadBytes:       {s.ReadSectors, sectorBytes},
			diskWrittenBytes:    {s.WriteSectors, sectorBytes},
			diskReadsCompleted:  {s.ReadIOs, 1},
			diskWritesCompleted: {s.WriteIOs, 1},
			diskReadTime:        {s.ReadTicks, 0.001}, // ms
			diskWriteTime:       {s.WriteTicks, 0.001},
			diskIOTime:          {s.TotalTicks, 0.001},
		} {
			if c.v != nil && *c.v >= 0 {
				k.counters[i], k.has = *c.v*c.scale, k.has|1<<i
			}
		}
		if k.has != 0 {
			disks = append(disks, k)
		}
	}
	slices.SortFunc(disks, func(a, b guestDisk) int { return strings.Compare(a.name, b.name) })
	return disks[:min(len(disks), maxGuestDevices)]
}

// cpuModes are the modes of veil_guest_cpu_seconds_total, node_exporter's, in label order.
// guest and guestnice are left out as node_exporter leaves them out of node_cpu_seconds_total:
// the kernel counts them in user and nice already.
var cpuModes = [...]string{"idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"}

// userHZ is the unit of guest-get-cpustats: the guest kernel's USER_HZ, 100 on Linux.
const userHZ = 100

// guestCPU is a guest's CPU time by mode summed over its CPUs.
type guestCPU struct {
	seconds [len(cpuModes)]float64
	has     uint8 // bit i: every CPU reported cpuModes[i]
}

// guestCPUSeconds sums the CPUs of type linux (the only type whose unit is known). A mode has
// a series only when every CPU reported it, not negative: a sum over some CPUs would be less
// than the guest's time, and would go back when a CPU reports it again.
func guestCPUSeconds(list []veil.GuestCPUStats) *guestCPU {
	var c guestCPU
	c.has = 1<<len(cpuModes) - 1
	n := 0
	for _, p := range list {
		if p.Type != "linux" {
			continue
		}
		n++
		for i, v := range [len(cpuModes)]*float64{p.Idle, p.IOWait, p.IRQ, p.Nice, p.SoftIRQ, p.Steal, p.System, p.User} {
			if v == nil || *v < 0 {
				c.has &^= 1 << i
				continue
			}
			c.seconds[i] += *v / userHZ
		}
	}
	if n == 0 || c.has == 0 {
		return nil
	}
	return &c
}

// guestLoad is guest-get-load: load1, load5, load15.
type guestLoad struct {
	avg [3]float64
	has uint8 // bit i: avg[i] was reported
}

// guestLoadAverages keeps the load averages the guest reported, not negative.
func guestLoadAverages(l veil.GuestLoad) *guestLoad {
	var g guestLoad
	for i, v := range [3]*float64{l.Load1, l.Load5, l.Load15} {
		if v != nil && *v >= 0 {
			g.avg[i], g.has = *v, g.has|1<<i
		}
	}
	if g.has == 0 {
		return nil
	}
	return &g
}
