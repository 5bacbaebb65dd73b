package collector

// Guest checker tests: what is kept of filesystems and network interfaces.

import (
	"slices"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

func TestGuestFilesystemsFilter(t *testing.T) {
	num := func(v float64) *veil.Number { n := veil.Number(v); return &n }
	in := []veil.GuestFilesystem{
		{Name: "vda1", Mountpoint: "/", Type: "ext4", TotalBytes: num(100), UsedBytes: num(40)},
		{Name: "vda1", Mountpoint: "/", Type: "ext4", TotalBytes: num(100), UsedBytes: num(40)}, // bind mount twice
		{Name: "tmpfs", Mountpoint: "/run", Type: "tmpfs", TotalBytes: num(10), UsedBytes: num(1)},
		{Name: "loop0", Mountpoint: "/snap/x", Type: "squashfs"},
		{Name: "vdb", Mountpoint: "/data", Type: "xfs", TotalBytes: num(500)}, // used missing
	}
	got := guestFilesystems(in, []string{"tmpfs"}, nil)
	want := []guestFS{{mountpoint: "/", fstype: "ext4", device: "vda1", size: 100, used: 40}}
	if !slices.Equal(got, want) {
		t.Errorf("guestFilesystems = %+v, want %+v", got, want)
	}
}
