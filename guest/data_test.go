package guest

// Guest checker tests: what is kept of filesystems and network interfaces.

import (
	"regexp"
	"slices"
	"testing"

	"github.com/veil-exporter/veil-exporter/config"
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
	got, cut := guestFilesystems(in, []string{"tmpfs"}, nil)
	want := []guestFS{{mountpoint: "/", fstype: "ext4", device: "vda1", size: 100, used: 40}}
	if !slices.Equal(got, want) || cut != 0 {
		t.Errorf("guestFilesystems = %+v, want %+v", got, want)
	}
}

// TestGuestFilesystemsMountpointsExclude: the default fs_mountpoints_exclude keeps the volumes a
// person cares about and drops the bind mounts a Kubernetes node or a container host makes by
// the hundred.
func TestGuestFilesystemsMountpointsExclude(t *testing.T) {
	out := config.Default().Guest.FSMountpointsExclude.Regexp()
	num := func(v float64) *veil.Number { n := veil.Number(v); return &n }
	fs := func(mp string) veil.GuestFilesystem {
		return veil.GuestFilesystem{Name: "vda1", Mountpoint: mp, Type: "ext4", TotalBytes: num(100), UsedBytes: num(1)}
	}
	keep := []string{"/", "/home", "/var/lib/postgresql", "/var/lib/dockerish", "/snapshots", "/data/run", `C:\`}
	drop := []string{"/dev", "/dev/shm", "/run/user/1000", "/sys/fs/cgroup", "/proc", "/snap/core20/2318",
		"/var/lib/kubelet/pods/0f1e/volumes/kubernetes.io~projected/kube-api-access-x",
		"/var/lib/docker/overlay2/abc/merged", "/var/lib/containers/storage/overlay"}
	var in []veil.GuestFilesystem
	for _, mp := range append(slices.Clone(keep), drop...) {
		in = append(in, fs(mp))
	}
	var got []string
	kept, _ := guestFilesystems(in, nil, out)
	for _, f := range kept {
		got = append(got, f.mountpoint)
	}
	slices.Sort(keep) // kept in the order of their series
	if !slices.Equal(got, keep) {
		t.Errorf("kept %q, want %q", got, keep)
	}
}

func TestGuestInterfacesFilter(t *testing.T) {
	stats := func(k float64) *veil.GuestNetworkStatistics {
		return &veil.GuestNetworkStatistics{RxBytes: veil.Number(k), RxPackets: 1, RxErrs: 2, RxDropped: 3,
			TxBytes: 4, TxPackets: 5, TxErrs: 6, TxDropped: 7}
	}
	in := []veil.GuestNetworkInterface{
		{Name: "lo", Statistics: stats(1)},
		{Name: "eth0", Statistics: stats(1000)},
		{Name: "eth0", Statistics: stats(2000)}, // a second entry of the same name: kept once
		{Name: "eth1"},                          // no statistics: nothing to count
		{Name: "docker0", Statistics: stats(5)},
		{Name: "", Statistics: stats(5)},
	}
	got := guestInterfaces(in, regexp.MustCompile(`^(lo|docker\d+)$`))
	if len(got) != 1 {
		t.Fatalf("kept %d interfaces, want eth0 only: %+v", len(got), got)
	}
	n := got[0]
	if n.name != "eth0" {
		t.Errorf("interface %q, want eth0", n.name)
	}
	if want := [nicCounters]float64{1000, 1, 2, 3, 4, 5, 6, 7}; n.counters != want {
		t.Errorf("counters %v, want %v", n.counters, want)
	}
}
