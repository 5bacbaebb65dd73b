package guest

// Guest checker tests of the statistics newer agents offer: guest-get-diskstats,
// guest-get-cpustats and guest-get-load.

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// simAnswer asks the simulator for cmd on VM id over plain HTTP and returns the result: the
// expected values come from the guest's own answer, not from the code under test.
func simAnswer(t *testing.T, sim *veiltest.Server, id, cmd string) json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"qemu_cmd": cmd, "fargs": map[string]any{}})
	req, _ := http.NewRequest("POST", sim.URL+"/api/domains/"+id+"/guest-command/", bytes.NewReader(body))
	req.Header.Set("Authorization", "jwt "+sim.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]json.RawMessage
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil {
		t.Fatalf("%s on %s: %d %s", cmd, id, resp.StatusCode, b)
	}
	return m[cmd]
}

// statsSeriesOf returns the VM's series of the statistics families.
func statsSeriesOf(s map[string]float64, id string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s {
		if (strings.HasPrefix(k, "veil_guest_disk_") || strings.HasPrefix(k, "veil_guest_cpu_") || strings.HasPrefix(k, "veil_guest_load")) &&
			strings.Contains(k, `domain_id="`+id+`"`) {
			out[k] = v
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestGuestCheckerExportsGuestStats: guests whose agent offers the statistics get their disks
// (whole disks only, by node_exporter's default exclusion), CPU time by mode summed over their
// CPUs and load averages, with exactly the values the guest answered; guests that do not
// offer them get none of those series and are never sent the commands; the statistics are
// read once per stats_interval, not at every ping.
func TestGuestCheckerExportsGuestStats(t *testing.T) {
	at := time.Now()
	o := guestSimOptions(12)
	o.Now = func() time.Time { return at } // the guests' counters hold still: the test can read them too
	cfg := guestTestConfig()
	cfg.StatsInterval = time.Second // five pings per read
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg})
	ids := e.eligibleIDs()
	offers := map[string][]string{}
	var with, without []string
	for _, id := range ids {
		d, _ := e.sim.Domain(id)
		offers[id] = d.GuestCommands
		if slices.Contains(d.GuestCommands, guestCmdDiskStats) {
			with = append(with, id)
		} else {
			without = append(without, id)
		}
	}
	if len(with) == 0 || len(without) == 0 {
		t.Fatalf("want guests with and without the statistics, got %d and %d", len(with), len(without))
	}
	e.eventually("statistics of every guest offering them", 10*time.Second, func() bool {
		s := e.series()
		for _, id := range with {
			if len(statsSeriesOf(s, id)) == 0 {
				return false
			}
		}
		return true
	})
	e.waitSweeps(1, 5*time.Second) // every guest pinged since, so those without have had their chance
	s := e.series()
	for _, id := range with {
		want := wantStats(t, e, id, offers[id])
		got := statsSeriesOf(s, id)
		for k, w := range want {
			if g, ok := got[k]; !ok || !near(g, w) {
				t.Errorf("%s = %v (present %v), the guest answered %v", k, g, ok, w)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected series %s = %v", k, g)
			}
		}
	}
	for _, id := range without {
		if got := statsSeriesOf(s, id); len(got) != 0 {
			t.Errorf("%s does not offer the statistics but has %v", id, got)
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		n := mf.GetName()
		counter := strings.HasPrefix(n, "veil_guest_disk_") || n == "veil_guest_cpu_seconds_total"
		gauge := strings.HasPrefix(n, "veil_guest_load")
		if counter && mf.GetType().String() != "COUNTER" || gauge && mf.GetType().String() != "GAUGE" {
			t.Errorf("%s is a %s", n, mf.GetType())
		}
	}

	checkStatsPaced(t, e, with, without)
	for k := range s {
		if strings.HasPrefix(k, "veil_guest_command_errors_total{") {
			t.Errorf("error counted: %s", k)
		}
	}
}

// checkStatsPaced: over six sweeps the statistics are read only from guests that offer them,
// once per stats_interval of the time the log spans, the disks' and the CPUs' together. Read
// slots are an interval apart and a read never goes before its slot; one late by up to an
// interval may come just before the next on time: so at most span ÷ interval + 2 reads. (Five
// pings per read holds only while every ping is on time, which a loaded machine does not give.)
func checkStatsPaced(t *testing.T, e *guestEnv, with, without []string) {
	t.Helper()
	e.sim.ResetRequests()
	e.waitSweeps(6, 10*time.Second)
	interval := e.gc.cfg.StatsInterval
	// Six pings of each guest hold at least one statistics read (one every fifth); a sweep
	// missed under load leaves five, which may fall between two reads.
	var sent map[string][]string
	testutil.Eventually(t, 20*time.Second, func() bool {
		sent = guestCmdsSent(t, e.sim.Requests())
		for _, id := range with {
			if countCmd(sent[id], guestCmdPing) < 6 {
				return false
			}
		}
		return true
	}, "six pings of every guest")
	for _, id := range without {
		for _, c := range []string{guestCmdDiskStats, guestCmdCPUStats, guestCmdLoad} {
			if n := countCmd(sent[id], c); n != 0 {
				t.Errorf("%s: %s sent %d times to a guest that does not offer it", id, c, n)
			}
		}
	}
	span := guestLogSpans(e.sim.Requests())
	for _, id := range with {
		pings, reads := countCmd(sent[id], guestCmdPing), countCmd(sent[id], guestCmdDiskStats)
		if most := int(span[id]/interval) + 2; reads < 1 || reads > most {
			t.Errorf("%s: %d diskstats reads (and %d pings) in %s, want 1 to %d at one per stats_interval %s", id, reads, pings, span[id], most, interval)
		}
		if !statsReadTogether(sent[id]) {
			t.Errorf("%s: disk and cpu statistics not read together: %v", id, sent[id])
		}
	}
}

// wantStats is what the statistics series of VM id must be, from what its guest answers: the
// whole disks' counters in base units, the CPU time summed over its CPUs and, where offered,
// the load averages.
func wantStats(t *testing.T, e *guestEnv, id string, offered []string) map[string]float64 {
	t.Helper()
	wholeDisk := regexp.MustCompile(`^vd[a-z]$`)
	want := map[string]float64{}
	var disks []struct {
		Name  string
		Stats map[string]float64
	}
	must(t, json.Unmarshal(simAnswer(t, e.sim, id, guestCmdDiskStats), &disks))
	for _, d := range disks {
		if !wholeDisk.MatchString(d.Name) { // loop0, vda1, vda15: left out
			continue
		}
		k := func(name string) string {
			return guestKey("veil_guest_disk_"+name+"_total", "domain_id", id, "device", d.Name)
		}
		want[k("read_bytes")] = d.Stats["read-sectors"] * 512
		want[k("written_bytes")] = d.Stats["write-sectors"] * 512
		want[k("reads_completed")] = d.Stats["read-ios"]
		want[k("writes_completed")] = d.Stats["write-ios"]
		want[k("read_time_seconds")] = d.Stats["read-ticks"] / 1000
		want[k("write_time_seconds")] = d.Stats["write-ticks"] / 1000
		want[k("io_time_seconds")] = d.Stats["total-ticks"] / 1000
	}
	var cpus []map[string]any
	must(t, json.Unmarshal(simAnswer(t, e.sim, id, guestCmdCPUStats), &cpus))
	for _, mode := range []string{"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"} {
		sum := 0.0
		for _, c := range cpus {
			sum += c[mode].(float64)
		}
		want[guestKey("veil_guest_cpu_seconds_total", "domain_id", id, "mode", mode)] = sum / 100
	}
	if slices.Contains(offered, guestCmdLoad) {
		var load map[string]float64
		must(t, json.Unmarshal(simAnswer(t, e.sim, id, guestCmdLoad), &load))
		for _, m := range []string{"1", "5", "15"} {
			want[guestKey("veil_guest_load"+m, "domain_id", id)] = load["load"+m]
		}
	}
	return want
}

// badStatsAnswers are a guest's answers to the statistics, by phase: malformed values, a
// reboot (counters start again), shapes no schema gives.
var badStatsAnswers = [...]map[string]string{{
	guestCmdDiskStats: `[
		{"name": "vda", "major": 252, "minor": 0, "stats": {"read-sectors": "1000", "write-sectors": 2000, "read-ios": -1,
			"write-ios": " 30 ", "read-ticks": 1500, "total-ticks": null, "weight-ticks": 99}},
		{"name": "vda1", "stats": {"read-sectors": 5}},
		{"name": "vdb", "stats": {"read-ios": "many", "write-ios": {"n": 1}}},
		{"name": "vdc"},
		{"stats": {"read-ios": 1}},
		7
	]`,
	guestCmdCPUStats: `[
		{"type": "linux", "cpu": 0, "user": "100", "nice": 0, "system": 50, "idle": 1000, "iowait": 5, "irq": 0, "softirq": 1, "steal": -3},
		{"type": "linux", "cpu": 1, "user": 200, "nice": 0, "system": 70, "idle": 900, "irq": 0, "softirq": 2, "steal": 0},
		{"type": "other", "cpu": 2, "user": 100000}
	]`,
	guestCmdLoad: `{"load1": "0.5", "load5": -1}`,
}, { // the guest rebooted: its counters start again
	guestCmdDiskStats: `[{"name": "vda", "stats": {"read-sectors": 8, "write-sectors": 16, "read-ios": 1, "write-ios": 1,
		"read-ticks": 2, "write-ticks": 3, "total-ticks": 4}}]`,
	guestCmdCPUStats: `[{"type": "linux", "cpu": 0, "user": 7, "nice": 0, "system": 2, "idle": 300, "iowait": 0, "irq": 0, "softirq": 0, "steal": 0}]`,
	guestCmdLoad:     `{"load1": 0.01, "load5": 0.02, "load15": 0.03}`,
}, { // shapes no schema gives
	guestCmdDiskStats: `{"vda": {}}`,
	guestCmdCPUStats:  `"busy"`,
	guestCmdLoad:      `[0.1, 0.2, 0.3]`,
}}

// answeringFront answers the command list with every command the checker knows and the
// commands of answers[phase] with their answer, and passes the rest to the simulator.
func answeringFront(answers []map[string]string, phase *atomic.Int32) func(sim http.Handler) http.Handler {
	all := []string{guestCmdPing, guestCmdOSInfo, guestCmdFSInfo, guestCmdTime, guestCmdInterfaces, guestCmdDiskStats, guestCmdCPUStats, guestCmdLoad}
	return func(sim http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := guestRequestVM(r.URL.Path, "available-guest-cmds"); ok {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{"qemu_available_cmds": all})
				return
			}
			if _, ok := guestRequestVM(r.URL.Path, "guest-command"); ok {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				var body struct {
					Cmd string `json:"qemu_cmd"`
				}
				_ = json.Unmarshal(b, &body)
				if a, ok := answers[phase.Load()][body.Cmd]; ok {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"`+body.Cmd+`": `+a+`}`)
					return
				}
			}
			sim.ServeHTTP(w, r)
		})
	}
}

// TestGuestCheckerGuestStatsBadInput: answers with statistics missing, as strings, negative or
// not numbers give series for exactly what the guest reported readably (nothing invented);
// counters that go back (the guest rebooted) are exported as read; an answer of the wrong
// shape is counted as bad_answer and drops that family of the VM; no sweep fails.
func TestGuestCheckerGuestStatsBadInput(t *testing.T) {
	answers := badStatsAnswers
	var phase atomic.Int32
	front := answeringFront(answers[:], &phase)
	cfg := guestTestConfig()
	cfg.StatsInterval = 200 * time.Millisecond
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(1), cfg: cfg, front: front})
	id := e.eligibleIDs()[0]
	disk := func(name, dev string) string {
		return guestKey("veil_guest_disk_"+name+"_total", "domain_id", id, "device", dev)
	}
	cpu := func(mode string) string {
		return guestKey("veil_guest_cpu_seconds_total", "domain_id", id, "mode", mode)
	}
	load := func(m string) string { return guestKey("veil_guest_load"+m, "domain_id", id) }
	expect := func(what string, want map[string]float64) {
		t.Helper()
		var got map[string]float64
		e.eventually(what, 10*time.Second, func() bool {
			got = statsSeriesOf(e.series(), id)
			if len(got) != len(want) {
				return false
			}
			for k, w := range want {
				if g, ok := got[k]; !ok || !near(g, w) {
					return false
				}
			}
			return true
		})
	}
	expect("the readable statistics, nothing else", map[string]float64{
		disk("read_bytes", "vda"):        1000 * 512,
		disk("written_bytes", "vda"):     2000 * 512,
		disk("writes_completed", "vda"):  30,
		disk("read_time_seconds", "vda"): 1.5,
		cpu("user"):                      3,
		cpu("nice"):                      0,
		cpu("system"):                    1.2,
		cpu("idle"):                      19,
		cpu("irq"):                       0,
		cpu("softirq"):                   0.03,
		load("1"):                        0.5,
	})
	phase.Store(1)
	expect("the counters after the reboot, as read", map[string]float64{
		disk("read_bytes", "vda"): 8 * 512, disk("written_bytes", "vda"): 16 * 512,
		disk("reads_completed", "vda"): 1, disk("writes_completed", "vda"): 1,
		disk("read_time_seconds", "vda"): 0.002, disk("write_time_seconds", "vda"): 0.003, disk("io_time_seconds", "vda"): 0.004,
		cpu("user"): 0.07, cpu("nice"): 0, cpu("system"): 0.02, cpu("idle"): 3, cpu("iowait"): 0, cpu("irq"): 0,
		cpu("softirq"): 0, cpu("steal"): 0,
		load("1"): 0.01, load("5"): 0.02, load("15"): 0.03,
	})
	phase.Store(2)
	expect("no statistics from answers of the wrong shape", map[string]float64{})
	e.waitSweeps(1, 5*time.Second)
	for _, c := range []string{guestCmdDiskStats, guestCmdCPUStats, guestCmdLoad} {
		if v, _ := e.value("veil_guest_command_errors_total", "command", c, "reason", "bad_answer"); v < 1 {
			t.Errorf("%s answered of the wrong shape: bad_answer counted %v times", c, v)
		}
	}
	if v, _ := e.value("veil_guest_ping_success", "domain_id", id); v != 1 {
		t.Errorf("ping_success = %v, want 1", v)
	}
	if st := e.runStatus(); !st.Success {
		t.Errorf("RunStatus = %+v: a guest's answers failed the sweep", st)
	}
}

// TestGuestCheckerCountsRefusedStatsCommands: a guest that offers a statistics command and then
// fails it has that family's series dropped and the error counted with its reason; the other
// statistics and the sweep go on.
func TestGuestCheckerCountsRefusedStatsCommands(t *testing.T) {
	cfg := guestTestConfig()
	cfg.StatsInterval = 200 * time.Millisecond
	var vm string
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(12), cfg: cfg, before: func(e *guestEnv) {
		for _, id := range e.sim.DomainIDs() {
			if d, _ := e.sim.Domain(id); slices.Contains(d.GuestCommands, guestCmdLoad) {
				vm = id
				break
			}
		}
		if vm == "" {
			t.Fatal("no guest offers guest-get-load")
		}
	}})
	e.eventually("the statistics of the guest", 10*time.Second, func() bool {
		_, ok := e.value("veil_guest_cpu_seconds_total", "domain_id", vm, "mode", "user")
		_, ok2 := e.value("veil_guest_load1", "domain_id", vm)
		return ok && ok2
	})
	must(t, e.sim.SetGuestCommandError(vm, guestCmdCPUStats, "Failed to open file '/proc/stat': No such file or directory"))
	must(t, e.sim.SetGuestCommandError(vm, guestCmdLoad, "Command guest-get-load has been disabled"))
	e.eventually("the refused families gone", 10*time.Second, func() bool {
		s := statsSeriesOf(e.series(), vm)
		for k := range s {
			if strings.HasPrefix(k, "veil_guest_cpu_") || strings.HasPrefix(k, "veil_guest_load") {
				return false
			}
		}
		return len(s) > 0 // the disks stay
	})
	e.waitSweeps(1, 5*time.Second)
	if v, _ := e.value("veil_guest_command_errors_total", "command", guestCmdCPUStats, "reason", "api_error"); v < 1 {
		t.Errorf("refused cpustats counted %v times with reason api_error", v)
	}
	if v, _ := e.value("veil_guest_command_errors_total", "command", guestCmdLoad, "reason", "not_supported"); v < 1 {
		t.Errorf("disabled load counted %v times with reason not_supported", v)
	}
	if _, ok := e.value("veil_guest_disk_read_bytes_total", "domain_id", vm, "device", "vda"); !ok {
		t.Error("the disks of the guest are gone with the refused commands")
	}
	if v, _ := e.value("veil_guest_ping_success", "domain_id", vm); v != 1 {
		t.Errorf("ping_success = %v, want 1", v)
	}
	if st := e.runStatus(); !st.Success {
		t.Errorf("RunStatus = %+v: a guest's refusal failed the sweep", st)
	}
	must(t, e.sim.SetGuestCommandError(vm, guestCmdCPUStats, ""))
	e.eventually("the CPU series back once the guest answers again", 10*time.Second, func() bool {
		_, ok := e.value("veil_guest_cpu_seconds_total", "domain_id", vm, "mode", "user")
		return ok
	})
}

// statsReadTogether says whether every diskstats read of a VM's command log is followed by a
// cpustats read before the next diskstats, as one stats slot reads them. The log is cut while
// sweeps run, so a cpustats first (its diskstats came before the cut) and a diskstats last (its
// cpustats came after) are the edges of the window, not a split.
func statsReadTogether(cmds []string) bool {
	var seq []string
	for _, c := range cmds {
		if c == guestCmdDiskStats || c == guestCmdCPUStats {
			seq = append(seq, c)
		}
	}
	if len(seq) > 0 && seq[0] == guestCmdCPUStats {
		seq = seq[1:]
	}
	if len(seq) > 0 && seq[len(seq)-1] == guestCmdDiskStats {
		seq = seq[:len(seq)-1]
	}
	for i, c := range seq {
		if want := [2]string{guestCmdDiskStats, guestCmdCPUStats}[i%2]; c != want {
			return false
		}
	}
	return len(seq)%2 == 0
}

// TestGuestStatsOff: guest.stats_interval 0 reads no statistics, even from guests offering
// them, and exports none of their series; the other checks go on.
func TestGuestStatsOff(t *testing.T) {
	cfg := guestTestConfig()
	cfg.StatsInterval = 0
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(12), cfg: cfg})
	offering := 0
	for _, id := range e.eligibleIDs() {
		if d, _ := e.sim.Domain(id); slices.Contains(d.GuestCommands, guestCmdDiskStats) {
			offering++
		}
	}
	if offering == 0 {
		t.Fatal("no guest offers the statistics: the test would prove nothing")
	}
	e.waitSweeps(3, 10*time.Second)
	sent := guestCmdsSent(t, e.sim.Requests())
	pings := 0
	for id, cmds := range sent {
		pings += countCmd(cmds, guestCmdPing)
		for _, c := range []string{guestCmdDiskStats, guestCmdCPUStats, guestCmdLoad} {
			if n := countCmd(cmds, c); n != 0 {
				t.Errorf("%s: %s sent %d times with stats_interval 0", id, c, n)
			}
		}
	}
	if pings == 0 {
		t.Error("no ping sent: the checker did not run")
	}
	for k := range e.series() {
		if strings.HasPrefix(k, "veil_guest_disk_") || strings.HasPrefix(k, "veil_guest_cpu_seconds_total") || strings.HasPrefix(k, "veil_guest_load") {
			t.Errorf("series with stats_interval 0: %s", k)
		}
	}
}

// guestLogSpans is, per VM, the time from the first to the last guest command logged for it.
func guestLogSpans(reqs []veiltest.Request) map[string]time.Duration {
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for _, r := range reqs {
		id, ok := guestRequestVM(r.Path, "guest-command")
		if !ok {
			continue
		}
		if f, ok := first[id]; !ok || r.Start.Before(f) {
			first[id] = r.Start
		}
		if r.Start.After(last[id]) {
			last[id] = r.Start
		}
	}
	out := map[string]time.Duration{}
	for id, f := range first {
		out[id] = last[id].Sub(f)
	}
	return out
}
