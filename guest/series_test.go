package guest

// Guest checker tests: which VMs are checked and which series they get.

import (
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestGuestCheckerExportsPingOSFilesystemsAndClock(t *testing.T) {
	cfg := guestTestConfig()
	e, linux, windows := linuxAndWindowsEnv(t, cfg)
	ids := e.eligibleIDs()
	e.eventually("clock offsets of every VM", 5*time.Second, func() bool {
		s := e.series()
		for _, id := range ids {
			if _, ok := s[guestKey("veil_guest_clock_offset_seconds", "domain_id", id)]; !ok {
				return false
			}
		}
		return true
	})
	s := e.series()
	for _, id := range ids {
		if v := s[guestKey("veil_guest_ping_success", "domain_id", id)]; v != 1 {
			t.Errorf("ping_success of %s = %v, want 1", id, v)
		}
		if v, ok := s[guestKey("veil_guest_ping_duration_seconds", "domain_id", id)]; !ok || v <= 0 || v > 1 {
			t.Errorf("ping_duration of %s = %v (present %v), want a small positive round trip", id, v, ok)
		}
	}
	checkSeries(t, s, osFSClockChecks(linux, windows, len(ids)))
	linuxOS := 0
	for k := range s {
		if strings.HasPrefix(k, "veil_guest_os_info{") && strings.Contains(k, `domain_id="`+linux+`"`) {
			linuxOS++
			if !strings.Contains(k, `os_id="ubuntu"`) && !strings.Contains(k, `os_id="debian"`) {
				t.Errorf("linux os info %s, want ubuntu or debian", k)
			}
		}
		if strings.HasPrefix(k, "veil_") && !strings.Contains(k, `controller="sim"`) {
			t.Errorf("series without controller label: %s", k)
		}
	}
	if linuxOS != 1 {
		t.Errorf("linux VM has %d os_info series, want 1", linuxOS)
	}
	for k := range s {
		if strings.HasPrefix(k, "veil_collector_") {
			t.Errorf("the checker sends %s itself; the daemon emits it from RunStatus", k)
		}
	}
	if st := e.runStatus(); st.Collector != "guest" || !st.Success || st.Error != "" {
		t.Errorf("RunStatus = %+v, want a successful guest run", st)
	}
	e.waitSweeps(1, 5*time.Second)
	st := e.gc.Status()
	if st.Eligible != len(ids) || st.Checked != len(ids) || st.SweepDuration <= 0 || st.LastSweep.IsZero() {
		t.Errorf("Status() = %+v, want %d eligible and checked and a sweep", st, len(ids))
	}
	if v, ok := e.value("veil_guest_sweep_duration_seconds"); !ok || v <= 0 || v > 5 {
		t.Errorf("sweep_duration_seconds = %v (present %v), want about one ping interval", v, ok)
	}
}

// linuxAndWindowsEnv is an environment of six VMs, half Linux, whose agents answer on Windows
// too, with a Linux VM's clock 3 s ahead and a Windows VM's 1.5 s behind.
func linuxAndWindowsEnv(t *testing.T, cfg config.Guest) (e *guestEnv, linux, windows string) {
	t.Helper()
	e = newGuestEnv(t, guestEnvOpts{
		sim: func() veiltest.Options {
			o := guestSimOptions(6)
			o.LinuxFraction = 0.5
			o.GuestCommandsWindows = true // a platform whose agent answers on Windows too
			return o
		}(),
		cfg: cfg,
		before: func(e *guestEnv) {
			for _, id := range e.sim.DomainIDs() {
				d, _ := e.sim.Domain(id)
				if d.Linux && linux == "" {
					linux = id
				}
				if !d.Linux && windows == "" {
					windows = id
				}
			}
			if linux == "" || windows == "" {
				t.Fatalf("the simulator made no Linux/Windows pair")
			}
			if err := e.sim.SetClockOffset(linux, 3*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := e.sim.SetClockOffset(windows, -1500*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		},
	})
	return e, linux, windows
}

// seriesCheck is one series expected: its value (-1: any above 0) within tolerance, or absent.
type seriesCheck struct {
	name, key string
	want      float64
	tolerance float64
	absent    bool
}

// osFSClockChecks are the series of the OS, filesystems and clocks of the Linux and Windows
// VMs the simulator answers for, among eligible VMs.
func osFSClockChecks(linux, windows string, eligible int) []seriesCheck {
	return []seriesCheck{
		{name: "windows os info", key: guestKey("veil_guest_os_info", "domain_id", windows, "os_id", "mswindows",
			"os_name", "Microsoft Windows", "os_version", "Microsoft Windows Server 2019", "kernel_release", "17763",
			"machine", "x86_64", "pretty_name", "Windows Server 2019 Standard"), want: 1},
		{name: "linux root filesystem size", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", linux,
			"mountpoint", "/", "fstype", "ext4", "device", "vda1"), want: -1},
		{name: "linux /boot/efi used", key: guestKey("veil_guest_filesystem_used_bytes", "domain_id", linux,
			"mountpoint", "/boot/efi", "fstype", "vfat", "device", "vda15"), want: 6 << 20},
		{name: "linux /boot/efi size", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", linux,
			"mountpoint", "/boot/efi", "fstype", "vfat", "device", "vda15"), want: 105 << 20},
		{name: "tmpfs is excluded by type", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", linux,
			"mountpoint", "/run", "fstype", "tmpfs", "device", "tmpfs"), absent: true},
		{name: "squashfs without sizes is left out", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", linux,
			"mountpoint", "/snap/core20/2318", "fstype", "squashfs", "device", "loop0"), absent: true},
		{name: "windows C: volume", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", windows,
			"mountpoint", `C:\`, "fstype", "NTFS", "device", `\\?\Volume{6a1f-0001}\`), want: -1},
		{name: "windows volume without sizes is left out", key: guestKey("veil_guest_filesystem_size_bytes", "domain_id", windows,
			"mountpoint", "System Reserved", "fstype", "NTFS", "device", `\\?\Volume{6a1f-0002}\`), absent: true},
		{name: "linux clock ahead by 3s", key: guestKey("veil_guest_clock_offset_seconds", "domain_id", linux), want: 3, tolerance: 0.05},
		{name: "windows clock behind by 1.5s", key: guestKey("veil_guest_clock_offset_seconds", "domain_id", windows), want: -1.5, tolerance: 0.05},
		{name: "eligible", key: guestKey("veil_guest_eligible_domains"), want: float64(eligible)},
		{name: "checked", key: guestKey("veil_guest_checked_domains"), want: float64(eligible)},
	}
}

// checkSeries compares the series s with checks.
func checkSeries(t *testing.T, s map[string]float64, checks []seriesCheck) {
	t.Helper()
	for _, c := range checks {
		v, ok := s[c.key]
		switch {
		case c.absent && ok:
			t.Errorf("%s: %s present (%v), want absent", c.name, c.key, v)
		case c.absent:
		case !ok:
			t.Errorf("%s: %s missing", c.name, c.key)
		case c.want == -1 && v <= 0:
			t.Errorf("%s: %s = %v, want > 0", c.name, c.key, v)
		case c.want != -1 && math.Abs(v-c.want) > c.tolerance:
			t.Errorf("%s: %s = %v, want %v ± %v", c.name, c.key, v, c.want, c.tolerance)
		}
	}
}

func TestGuestCheckerContactsOnlyRunningVMsWithAgent(t *testing.T) {
	o := guestSimOptions(20)
	o.RunningFraction, o.AgentFraction, o.Templates = 0.6, 0.6, 2
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: guestTestConfig()})
	want := e.eligibleIDs()
	if len(want) == 0 || len(want) == len(e.sim.DomainIDs()) {
		t.Fatalf("need a mix of eligible and ineligible VMs, got %d of %d", len(want), len(e.sim.DomainIDs()))
	}
	e.waitSweeps(2, 5*time.Second)
	contacted := map[string]bool{}
	for _, r := range e.sim.Requests() {
		for _, action := range []string{"guest-command", "available-guest-cmds"} {
			if id, ok := guestRequestVM(r.Path, action); ok {
				contacted[id] = true
			}
		}
	}
	var got []string
	for id := range contacted {
		got = append(got, id)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("contacted VMs %v, want exactly the eligible %v", got, want)
	}
	if v, _ := e.value("veil_guest_eligible_domains"); v != float64(len(want)) {
		t.Errorf("eligible_domains = %v, want %d", v, len(want))
	}
}

func TestGuestCheckerDropsSeriesOfVMsThatLeave(t *testing.T) {
	cases := []struct {
		name   string
		action func(*veiltest.Server, string) error
	}{
		{"powered off", func(s *veiltest.Server, id string) error { return s.PowerOff(id) }},
		{"agent stopped", func(s *veiltest.Server, id string) error { return s.SetGuestAgent(id, false) }},
		{"deleted", func(s *veiltest.Server, id string) error { return s.DeleteVM(id) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(3), cfg: guestTestConfig()})
			ids := e.eligibleIDs()
			gone, stays := ids[0], ids[1]
			hasSeries := func(id string) bool {
				for k := range e.series() {
					if strings.Contains(k, `domain_id="`+id+`"`) {
						return true
					}
				}
				return false
			}
			e.eventually("clock series of both VMs", 5*time.Second, func() bool {
				_, ok1 := e.value("veil_guest_clock_offset_seconds", "domain_id", gone)
				_, ok2 := e.value("veil_guest_clock_offset_seconds", "domain_id", stays)
				return ok1 && ok2
			})
			if err := c.action(e.sim, gone); err != nil {
				t.Fatal(err)
			}
			e.refresh()
			if hasSeries(gone) {
				t.Errorf("series of %s remain at the first scrape after the inventory refresh", gone)
			}
			if !hasSeries(stays) {
				t.Errorf("series of %s, still running, are gone", stays)
			}
			if v, _ := e.value("veil_guest_eligible_domains"); v != float64(len(ids)-1) {
				t.Errorf("eligible_domains = %v, want %d", v, len(ids)-1)
			}
			// The checker stops calling it: two whole sweeps with nothing for the VM. A visit
			// begun before it left may still be sending (its commands each up to the command
			// timeout): the sweeps are watched again until one pair is quiet, ten times at most.
			e.eventually("the checker to drop the VM", 5*time.Second, func() bool {
				e.gc.mu.Lock()
				defer e.gc.mu.Unlock()
				return e.gc.vms[gone] == nil
			})
			n := 0
			for range 10 {
				e.sim.ResetRequests()
				e.waitSweeps(2, 5*time.Second)
				if n = len(guestCmdsSent(t, e.sim.Requests())[gone]); n == 0 {
					break
				}
			}
			if n != 0 {
				t.Errorf("%d guest commands sent to %s in each of ten pairs of sweeps after it left", n, gone)
			}
		})
	}
}

// TestGuestCheckerExportsNetworkCounters: every checked VM has the eight counters of each
// interface guest-network-get-interfaces reports, except those network_interfaces_exclude
// names (lo by default), read once per network_interval, not at every ping.
func TestGuestCheckerExportsNetworkCounters(t *testing.T) {
	cfg := guestTestConfig()
	cfg.NetworkInterval = time.Second // five pings per network read
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(4), cfg: cfg})
	ids := e.eligibleIDs()
	families := []string{"receive_bytes", "receive_packets", "receive_errors", "receive_drop",
		"transmit_bytes", "transmit_packets", "transmit_errors", "transmit_drop"}
	perVM := func(s map[string]float64, id, family string) map[string]float64 {
		out := map[string]float64{}
		prefix := "veil_guest_network_" + family + "_total{"
		for k, v := range s {
			if strings.HasPrefix(k, prefix) && strings.Contains(k, `domain_id="`+id+`"`) {
				out[k] = v
			}
		}
		return out
	}
	e.eventually("network counters of every VM", 10*time.Second, func() bool {
		s := e.series()
		for _, id := range ids {
			if len(perVM(s, id, "receive_bytes")) == 0 {
				return false
			}
		}
		return true
	})
	s := e.series()
	for _, id := range ids {
		for _, f := range families {
			got := perVM(s, id, f)
			if len(got) != 1 {
				t.Errorf("%s of %s: %d series %v, want one (the VM's interface, lo excluded)", f, id, len(got), got)
			}
			for k, v := range got {
				if strings.Contains(k, `interface="lo"`) || !strings.Contains(k, `controller="sim"`) {
					t.Errorf("series %s", k)
				}
				if (f == "receive_bytes" || f == "transmit_packets") && v <= 0 {
					t.Errorf("%s = %v, want the guest's count", k, v)
				}
			}
		}
	}
	// The type is counter: what Prometheus needs to take a guest's reboot for a reset.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "veil_guest_network_") && mf.GetType().String() != "COUNTER" {
			t.Errorf("%s is a %s", mf.GetName(), mf.GetType())
		}
	}
	e.sim.ResetRequests()
	e.waitSweeps(6, 10*time.Second)
	sent := guestCmdsSent(t, e.sim.Requests())
	for _, id := range ids {
		pings, reads := countCmd(sent[id], guestCmdPing), countCmd(sent[id], guestCmdInterfaces)
		if reads < 1 || reads > pings/5+1 {
			t.Errorf("VM %s: %d interface reads for %d pings, want one per network_interval (5 pings)", id, reads, pings)
		}
	}
}

// TestGuestCheckerNetworkInterfacesExclude: an exclusion that matches every interface leaves
// no network series at all.
func TestGuestCheckerNetworkInterfacesExclude(t *testing.T) {
	cfg := guestTestConfig()
	cfg.NetworkInterfacesExclude = config.MustRegexp(`.`)
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(2), cfg: cfg})
	e.sim.ResetRequests()
	e.waitSweeps(3, 10*time.Second)
	if n := countCmd(slices.Concat(slices.Collect(maps.Values(guestCmdsSent(t, e.sim.Requests())))...), guestCmdInterfaces); n == 0 {
		t.Fatal("no interface read: the test proves nothing")
	}
	for k := range e.series() {
		if strings.HasPrefix(k, "veil_guest_network_") {
			t.Errorf("excluded interface exported: %s", k)
		}
	}
}
