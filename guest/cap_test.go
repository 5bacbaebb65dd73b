package guest

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestGuestDevicesAreCapped: a guest reporting more interfaces than maxGuestDevices has the
// first by name exported, no more.
func TestGuestDevicesAreCapped(t *testing.T) {
	var list []veil.GuestNetworkInterface
	for i := range maxGuestDevices + 10 {
		list = append(list, veil.GuestNetworkInterface{Name: fmt.Sprintf("veth%03d", i), Statistics: &veil.GuestNetworkStatistics{}})
	}
	nics := guestInterfaces(list, nil)
	if len(nics) != maxGuestDevices || nics[0].name != "veth000" || nics[len(nics)-1].name != fmt.Sprintf("veth%03d", maxGuestDevices-1) {
		t.Errorf("%d interfaces kept, %s..%s", len(nics), nics[0].name, nics[len(nics)-1].name)
	}
}

// TestGuestFilesystemsAreCapped: a guest reporting more filesystems than maxGuestDevices has the
// first by mount point exported, and says how many more there were.
func TestGuestFilesystemsAreCapped(t *testing.T) {
	var list []veil.GuestFilesystem
	one := veil.Number(1)
	for i := range maxGuestDevices + 36 {
		list = append(list, veil.GuestFilesystem{Name: "vda", Mountpoint: fmt.Sprintf("/mnt/%03d", maxGuestDevices+35-i), Type: "ext4", UsedBytes: &one, TotalBytes: &one})
	}
	fs, cut := guestFilesystems(list, nil, nil)
	if len(fs) != maxGuestDevices || cut != 36 || fs[0].mountpoint != "/mnt/000" || fs[len(fs)-1].mountpoint != fmt.Sprintf("/mnt/%03d", maxGuestDevices-1) {
		t.Errorf("%d filesystems kept (%s..%s), %d cut", len(fs), fs[0].mountpoint, fs[len(fs)-1].mountpoint, cut)
	}
}

// TestGuestDevicesDedupKeepsTheFirstByName: a guest answering with tens of thousands of distinct
// interfaces and disks (a container host, or a hostile guest) has the first maxGuestDevices by
// name kept. That this costs time in proportion, not its square (de-duplication by name was a
// scan of those kept so far), is BenchmarkGuestDevicesDedup's figure: ns per device at 50,000.
func TestGuestDevicesDedupKeepsTheFirstByName(t *testing.T) {
	nics, disks := manyDevices(50000)
	if got := guestInterfaces(nics, nil); len(got) != maxGuestDevices || got[0].name != "veth000000" || got[len(got)-1].name != fmt.Sprintf("veth%06d", maxGuestDevices-1) {
		t.Errorf("%d interfaces kept", len(got))
	}
	if got := guestDisks(disks, nil); len(got) != maxGuestDevices || got[0].name != "veth000000" {
		t.Errorf("%d disks kept", len(got))
	}
}

// BenchmarkGuestDevicesDedup: guestInterfaces and guestDisks over 50,000 distinct devices; the
// ns/device figure stays flat as the count grows (VEIL_BENCH_DEVICES) when the cost is linear.
func BenchmarkGuestDevicesDedup(b *testing.B) {
	n := 50000
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_DEVICES")); err == nil && v > 0 {
		n = v
	}
	nics, disks := manyDevices(n)
	for b.Loop() {
		guestInterfaces(nics, nil)
		guestDisks(disks, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/device")
}

// manyDevices is n distinct interfaces and disks, each reporting statistics.
func manyDevices(n int) ([]veil.GuestNetworkInterface, []veil.GuestDiskStats) {
	nics := make([]veil.GuestNetworkInterface, n)
	disks := make([]veil.GuestDiskStats, n)
	one := 1.0
	for i := range n {
		name := fmt.Sprintf("veth%06d", i)
		nics[i] = veil.GuestNetworkInterface{Name: name, Statistics: &veil.GuestNetworkStatistics{}}
		disks[i] = veil.GuestDiskStats{Name: name}
		disks[i].Stats.ReadSectors = &one
	}
	return nics, disks
}
