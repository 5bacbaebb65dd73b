package veiltest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// simClock is a clock a test moves by hand.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestGuestStatsCommands: newer agents of Linux guests offer guest-get-diskstats and
// guest-get-cpustats (some guest-get-load too) and answer them with counters that grow with
// the guest's uptime and restart when it is powered on again; the others do not offer them and
// refuse them as QEMU refuses an unknown command; an offered command can be made to fail.
func TestGuestStatsCommands(t *testing.T) {
	clock := &simClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	s, c := newSim(t, Options{Seed: 3, VMs: 60, Templates: -1, RunningFraction: 1, AgentFraction: 1, LinuxFraction: 0.8, Now: clock.Now})
	checkGenerations(t, s, c)
	cmd := func(vm, name string) (int, []byte) {
		return c.do("POST", "/api/domains/"+vm+"/guest-command/", map[string]any{"qemu_cmd": name, "fargs": map[string]any{}})
	}
	result := func(vm, name string, v any) {
		t.Helper()
		st, b := cmd(vm, name)
		var m map[string]json.RawMessage
		if st != 200 || json.Unmarshal(b, &m) != nil || json.Unmarshal(m[name], v) != nil {
			t.Fatalf("%s on %s: %d %s", name, vm, st, b)
		}
	}
	newest := pickVM(t, s, func(d DomainInfo) bool { return slices.Contains(d.GuestCommands, "guest-get-load") })
	old := pickVM(t, s, func(d DomainInfo) bool { return d.Linux && len(d.GuestCommands) == 40 })

	var disks1, disks2 []guestDisk
	result(newest, "guest-get-diskstats", &disks1)
	checkDiskStats(t, disks1)
	var cpus1, cpus2 []map[string]any
	result(newest, "guest-get-cpustats", &cpus1)
	if info, _ := s.Domain(newest); len(cpus1) == 0 {
		t.Fatalf("no CPUs for %+v", info)
	}
	var load map[string]float64
	result(newest, "guest-get-load", &load)
	if _, ok := load["load15"]; !ok || len(load) != 3 {
		t.Errorf("load %v", load)
	}

	clock.Add(10 * time.Second)
	result(newest, "guest-get-diskstats", &disks2)
	result(newest, "guest-get-cpustats", &cpus2)
	for i := range disks1 {
		for k, v := range disks1[i].Stats {
			if disks2[i].Stats[k] < v {
				t.Errorf("disk %s %s went from %d to %d", disks1[i].Name, k, v, disks2[i].Stats[k])
			}
		}
	}
	if disks2[1].Stats["read-ios"] <= disks1[1].Stats["read-ios"] {
		t.Errorf("%s read-ios did not grow in 10 s: %d, %d", disks1[1].Name, disks1[1].Stats["read-ios"], disks2[1].Stats["read-ios"])
	}
	checkCPUTicks(t, cpus1, cpus2)
	// A power cycle is a reboot: the counters start again.
	if err := s.PowerOff(newest); err != nil {
		t.Fatal(err)
	}
	if err := s.PowerOn(newest); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	var disks3 []guestDisk
	result(newest, "guest-get-diskstats", &disks3)
	if disks3[1].Stats["read-ios"] >= disks2[1].Stats["read-ios"] {
		t.Errorf("read-ios %d after the reboot, %d before: want them restarted", disks3[1].Stats["read-ios"], disks2[1].Stats["read-ios"])
	}

	if st, b := cmd(old, "guest-get-diskstats"); st != 400 || !strings.Contains(string(b), "has not been found") {
		t.Errorf("diskstats on an older agent: %d %s", st, b)
	}
	if err := s.SetGuestCommandError(newest, "guest-get-cpustats", "Failed to open file '/proc/stat'"); err != nil {
		t.Fatal(err)
	}
	if st, b := cmd(newest, "guest-get-cpustats"); st != 400 || !strings.Contains(string(b), "/proc/stat") {
		t.Errorf("refused cpustats: %d %s", st, b)
	}
	if d, _ := s.Domain(newest); !slices.Contains(d.GuestCommands, "guest-get-cpustats") {
		t.Errorf("the refused command is no longer offered")
	}
	c.json("POST", "/_sim/domains/"+newest+"/command_error", map[string]any{"command": "guest-get-cpustats", "message": ""}, 200)
	if st, b := cmd(newest, "guest-get-cpustats"); st != 200 {
		t.Errorf("cpustats after the error was cleared: %d %s", st, b)
	}
}

// checkDiskStats: every disk has every counter, reads of 4 KiB, and vda, its partitions and a loop
// device are there.
func checkDiskStats(t *testing.T, disks1 []guestDisk) {
	t.Helper()
	var names []string
	for _, d := range disks1 {
		names = append(names, d.Name)
		for _, k := range []string{"read-sectors", "write-sectors", "read-ios", "write-ios", "read-ticks", "write-ticks", "total-ticks"} {
			if _, ok := d.Stats[k]; !ok {
				t.Errorf("disk %s has no %s", d.Name, k)
			}
		}
		if d.Stats["read-sectors"] != 8*d.Stats["read-ios"] {
			t.Errorf("disk %s: %d sectors for %d reads, want 4 KiB reads", d.Name, d.Stats["read-sectors"], d.Stats["read-ios"])
		}
	}
	if !slices.Contains(names, "vda") || !slices.Contains(names, "vda1") || !slices.Contains(names, "loop0") {
		t.Errorf("disks %v: want vda, its partitions and a loop device", names)
	}
}

// checkCPUTicks: CPU counters read 10 s apart never go back, and grow by USER_HZ a second in all.
func checkCPUTicks(t *testing.T, cpus1, cpus2 []map[string]any) {
	t.Helper()
	var total1, total2 int64
	for i := range cpus1 {
		for k, v := range cpus1[i] {
			if k == "type" || k == "cpu" {
				continue
			}
			a, b := int64(v.(float64)), int64(cpus2[i][k].(float64))
			if b < a {
				t.Errorf("cpu %d %s went from %d to %d", i, k, a, b)
			}
			total1, total2 = total1+a, total2+b
		}
	}
	// USER_HZ: 100 ticks a second on each CPU (the modes of a busy CPU round down a little).
	if d := total2 - total1; d > int64(len(cpus1))*1000 || d < int64(len(cpus1))*990 {
		t.Errorf("all modes of %d CPUs grew by %d ticks in 10 s, want about %d", len(cpus1), d, len(cpus1)*1000)
	}
}

// checkGenerations: each guest lists the commands of its agent's generation (7.1 or 10.0 or older),
// and every generation is there.
func checkGenerations(t *testing.T, s *Server, c *client) {
	t.Helper()
	gens := map[int]int{}
	for _, id := range s.DomainIDs() {
		d, _ := s.Domain(id)
		v := c.json("GET", "/api/domains/"+id+"/available-guest-cmds/", nil, 200)
		var listed []string
		for _, x := range v["qemu_available_cmds"].([]any) {
			listed = append(listed, x.(string))
		}
		if !slices.Equal(listed, d.GuestCommands) {
			t.Fatalf("%s lists %v, Domain says %v", id, listed, d.GuestCommands)
		}
		disk, load := slices.Contains(listed, "guest-get-diskstats"), slices.Contains(listed, "guest-get-load")
		if cpu := slices.Contains(listed, "guest-get-cpustats"); cpu != disk || load && !disk {
			t.Fatalf("%s offers diskstats %v, cpustats %v, load %v: generations are 7.1 (both) and 10.0 (all three)", id, disk, cpu, load)
		}
		if disk && !d.Linux {
			t.Fatalf("Windows guest %s offers Linux-only commands", id)
		}
		gens[len(listed)]++
	}
	if gens[40] == 0 || gens[42] == 0 || gens[43] == 0 {
		t.Fatalf("guests by number of commands offered %v: want a share of each generation", gens)
	}
}

// guestDisk is an entry of guest-get-diskstats.
type guestDisk struct {
	Name  string
	Stats map[string]uint64
}
