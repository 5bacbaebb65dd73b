package guest

import (
	"fmt"
	"testing"
	"time"

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

// TestGuestDevicesDedupIsLinear: a guest answering with tens of thousands of distinct interfaces
// and disks (a container host, or a hostile guest) costs time in proportion, not its square,
// before the cap: de-duplication by name was a scan of those kept so far.
func TestGuestDevicesDedupIsLinear(t *testing.T) {
	const n = 50000
	nics := make([]veil.GuestNetworkInterface, n)
	disks := make([]veil.GuestDiskStats, n)
	one := 1.0
	for i := range n {
		name := fmt.Sprintf("veth%06d", i)
		nics[i] = veil.GuestNetworkInterface{Name: name, Statistics: &veil.GuestNetworkStatistics{}}
		disks[i] = veil.GuestDiskStats{Name: name}
		disks[i].Stats.ReadSectors = &one
	}
	start := time.Now()
	if got := guestInterfaces(nics, nil); len(got) != maxGuestDevices {
		t.Fatalf("%d interfaces kept", len(got))
	}
	if got := guestDisks(disks, nil); len(got) != maxGuestDevices {
		t.Fatalf("%d disks kept", len(got))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d interfaces and disks took %v", n, d)
	}
}
