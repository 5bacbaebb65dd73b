package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// guestEnv is a simulator, a real client, an inventory snapshot refreshed on demand (as the
// inventory collector would) and a running GuestChecker.
type guestEnv struct {
	t      testing.TB
	sim    *veiltest.Server
	client *veil.Client
	gc     *GuestChecker
	reg    *prometheus.Registry

	mu   sync.Mutex
	doms []veil.Domain
}

type guestEnvOpts struct {
	sim         veiltest.Options
	cfg         config.Guest
	rate        float64 // client budget, requests per second (0: unlimited)
	concurrency int     // client limit (default 16)
	before      func(*guestEnv)
	// front, when set, puts a handler in front of the simulator (an agent offering less).
	front func(sim http.Handler) http.Handler
}

func guestTestConfig() config.Guest {
	cfg := config.Default().Guest
	cfg.PingInterval = 200 * time.Millisecond
	cfg.OSInfoInterval = time.Minute
	cfg.FSInfoInterval = 200 * time.Millisecond
	cfg.TimeInterval = 200 * time.Millisecond
	cfg.CommandTimeout = 300 * time.Millisecond
	cfg.Concurrency = 4
	return cfg
}

// guestSimOptions: every VM running, with an agent, Linux, no templates, unless told otherwise.
func guestSimOptions(vms int) veiltest.Options {
	return veiltest.Options{VMs: vms, Seed: 7, Templates: -1, RunningFraction: 1, AgentFraction: 1,
		LinuxFraction: 1, InitialTasks: -1}
}

func newGuestEnv(t testing.TB, o guestEnvOpts) *guestEnv {
	t.Helper()
	sim := veiltest.New(o.sim)
	t.Cleanup(sim.Close)
	if o.concurrency == 0 {
		o.concurrency = 16
	}
	url := sim.URL
	if o.front != nil {
		target, _ := neturl.Parse(sim.URL)
		front := httptest.NewServer(o.front(httputil.NewSingleHostReverseProxy(target)))
		t.Cleanup(front.Close)
		url = front.URL
	}
	client, err := veil.New(veil.Config{URL: url, Token: sim.Token, MaxConcurrency: o.concurrency,
		MaxRequestsPerSecond: o.rate, RetryBaseDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	e := &guestEnv{t: t, sim: sim, client: client, reg: prometheus.NewRegistry()}
	if o.before != nil {
		o.before(e)
	}
	e.refresh()
	e.gc = NewGuestChecker("sim", client, o.cfg, e.snapshot, log.NewNopLogger())
	e.reg.MustRegister(e.gc)
	sim.ResetRequests()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.gc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of its context being canceled")
		}
	})
	return e
}

// refresh reads the inventory through the client, like the inventory collector does.
func (e *guestEnv) refresh() {
	e.t.Helper()
	doms, err := e.client.Domains(context.Background(), nil)
	if err != nil {
		e.t.Fatalf("reading domains: %v", err)
	}
	e.mu.Lock()
	e.doms = doms
	e.mu.Unlock()
}

func (e *guestEnv) snapshot() []veil.Domain {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.doms
}

// eligibleIDs are the VMs the simulator says are running, not templates, with an active agent.
func (e *guestEnv) eligibleIDs() []string {
	var ids []string
	for _, id := range e.sim.DomainIDs() {
		if d, ok := e.sim.Domain(id); ok && d.PowerState == veil.PowerOn && !d.Template && d.AgentActive {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// series gathers the registry into "name{label="value",...}" -> value, labels sorted.
func (e *guestEnv) series() map[string]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// guestKey builds a series key the way series does; controller="sim" is added.
func guestKey(name string, labels ...string) string {
	ls := []string{`controller="sim"`}
	for i := 0; i+1 < len(labels); i += 2 {
		ls = append(ls, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

func (e *guestEnv) value(name string, labels ...string) (float64, bool) {
	v, ok := e.series()[guestKey(name, labels...)]
	return v, ok
}

// eventually polls cond until it holds or the timeout passes.
func (e *guestEnv) eventually(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSweeps waits until n more full ping sweeps have ended.
func (e *guestEnv) waitSweeps(n int, timeout time.Duration) {
	e.t.Helper()
	last := e.gc.Status().LastSweep
	for i := 0; i < n; i++ {
		e.eventually("a full ping sweep", timeout, func() bool {
			s := e.gc.Status().LastSweep
			if s.After(last) {
				last = s
				return true
			}
			return false
		})
	}
}

// guestCmdsSent returns the qemu_cmd of every guest-command request in the log, per VM id.
func guestCmdsSent(t *testing.T, reqs []veiltest.Request) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range reqs {
		id, ok := guestRequestVM(r.Path, "guest-command")
		if !ok {
			continue
		}
		var body struct {
			Cmd string `json:"qemu_cmd"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("guest-command body %q: %v", r.Body, err)
		}
		out[id] = append(out[id], body.Cmd)
	}
	return out
}

// guestRequestVM extracts the VM id from /api/domains/{id}/<action>/.
func guestRequestVM(path, action string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/api/domains/")
	if !ok {
		return "", false
	}
	id, tail, ok := strings.Cut(rest, "/")
	if !ok || strings.Trim(tail, "/") != action {
		return "", false
	}
	return id, true
}

func countCmd(cmds []string, cmd string) int {
	n := 0
	for _, c := range cmds {
		if c == cmd {
			n++
		}
	}
	return n
}

func TestGuestCheckerExportsPingOSFilesystemsAndClock(t *testing.T) {
	cfg := guestTestConfig()
	var linux, windows string
	e := newGuestEnv(t, guestEnvOpts{
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
	checks := []struct {
		name, key string
		want      float64
		tolerance float64
		absent    bool
	}{
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
		{name: "eligible", key: guestKey("veil_guest_eligible_domains"), want: float64(len(ids))},
		{name: "checked", key: guestKey("veil_guest_checked_domains"), want: float64(len(ids))},
		{name: "collector success", key: guestKey("veil_collector_success", "collector", "guest"), want: 1},
	}
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
	e.waitSweeps(1, 5*time.Second)
	st := e.gc.Status()
	if st.Eligible != len(ids) || st.Checked != len(ids) || st.SweepDuration <= 0 || st.LastSweep.IsZero() {
		t.Errorf("Status() = %+v, want %d eligible and checked and a sweep", st, len(ids))
	}
	if v, ok := e.value("veil_guest_sweep_duration_seconds"); !ok || v <= 0 || v > 5 {
		t.Errorf("sweep_duration_seconds = %v (present %v), want about one ping interval", v, ok)
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
			// The checker stops calling it: nothing for the VM after the next sweeps.
			e.waitSweeps(1, 5*time.Second)
			e.sim.ResetRequests()
			e.waitSweeps(2, 5*time.Second)
			if n := len(guestCmdsSent(t, e.sim.Requests())[gone]); n != 0 {
				t.Errorf("%d guest commands sent to %s after it left", n, gone)
			}
		})
	}
}

func TestGuestCheckerHungAgentFailsPingWithTimeout(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(3), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	hung := ids[0]
	e.waitSweeps(1, 5*time.Second)
	if err := e.sim.SetGuestHang(hung, true); err != nil {
		t.Fatal(err)
	}
	e.eventually("ping_success 0 for the hung agent", 5*time.Second, func() bool {
		v, ok := e.value("veil_guest_ping_success", "domain_id", hung)
		return ok && v == 0
	})
	if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "timeout"); v < 1 {
		t.Errorf("command_errors_total{guest-ping,timeout} = %v, want >= 1", v)
	}
	for _, name := range []string{"veil_guest_clock_offset_seconds", "veil_guest_os_info"} {
		for k := range e.series() {
			if strings.HasPrefix(k, name+"{") && strings.Contains(k, hung) {
				t.Errorf("stale %s kept for an agent that does not answer", k)
			}
		}
	}
	for _, id := range ids[1:] {
		if v, _ := e.value("veil_guest_ping_success", "domain_id", id); v != 1 {
			t.Errorf("ping_success of healthy %s = %v, want 1", id, v)
		}
	}
	if v, _ := e.value("veil_collector_success", "collector", "guest"); v != 1 {
		t.Errorf("collector_success = %v; a guest that does not answer is not a failure of the controller", v)
	}
	st := e.gc.Status()
	if !strings.Contains(st.LastError, "timeout") || strings.Contains(st.LastError, e.sim.Token) {
		t.Errorf("Status().LastError = %q, want a timeout and no token", st.LastError)
	}
}

func TestGuestCheckerAsksAgainWhenTheAgentReconnects(t *testing.T) {
	cases := []struct {
		name       string
		down, back func(*guestEnv, string)
	}{
		{"ping failed then succeeded",
			func(e *guestEnv, id string) { must(t, e.sim.SetGuestHang(id, true)) },
			func(e *guestEnv, id string) { must(t, e.sim.SetGuestHang(id, false)) }},
		{"not eligible then eligible again",
			func(e *guestEnv, id string) {
				must(t, e.sim.SetGuestAgent(id, false))
				e.refresh()
				e.eventually("the checker to drop the VM", 5*time.Second, func() bool {
					e.gc.mu.Lock()
					defer e.gc.mu.Unlock()
					return e.gc.vms[id] == nil
				})
			},
			func(e *guestEnv, id string) { must(t, e.sim.SetGuestAgent(id, true)); e.refresh() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := guestTestConfig()
			cfg.OSInfoInterval = time.Hour // only a reconnect can make it ask again
			e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(2), cfg: cfg})
			id := e.eligibleIDs()[0]
			e.waitSweeps(2, 5*time.Second)
			before := e.sim.Requests()
			if n := countCmd(guestCmdsSent(t, before)[id], guestCmdOSInfo); n != 1 {
				t.Fatalf("osinfo asked %d times before the reconnect, want 1", n)
			}
			if n := guestCountAvailable(before, id); n != 1 {
				t.Fatalf("available-guest-cmds asked %d times before the reconnect, want 1", n)
			}
			c.down(e, id)
			e.eventually("the VM to be down or gone", 5*time.Second, func() bool {
				v, ok := e.value("veil_guest_ping_success", "domain_id", id)
				return !ok || v == 0
			})
			e.sim.ResetRequests()
			c.back(e, id)
			e.eventually("os info back", 5*time.Second, func() bool {
				for k := range e.series() {
					if strings.HasPrefix(k, "veil_guest_os_info{") && strings.Contains(k, id) {
						return true
					}
				}
				return false
			})
			after := e.sim.Requests()
			if n := countCmd(guestCmdsSent(t, after)[id], guestCmdOSInfo); n < 1 {
				t.Errorf("osinfo not asked again after the reconnect")
			}
			if n := guestCountAvailable(after, id); n < 1 {
				t.Errorf("available-guest-cmds not asked again after the reconnect")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func guestCountAvailable(reqs []veiltest.Request, id string) int {
	n := 0
	for _, r := range reqs {
		if got, ok := guestRequestVM(r.Path, "available-guest-cmds"); ok && got == id {
			n++
		}
	}
	return n
}

// guestSeriesOf counts the veil_guest_* series that name the VM.
func (e *guestEnv) guestSeriesOf(id string) []string {
	var out []string
	for k := range e.series() {
		if strings.HasPrefix(k, "veil_guest_") && strings.Contains(k, `domain_id="`+id+`"`) {
			out = append(out, k)
		}
	}
	return out
}

// guestRequestsTo counts the guest-command and available-guest-cmds requests for one VM.
func guestRequestsTo(reqs []veiltest.Request, id string) int {
	n := 0
	for _, r := range reqs {
		for _, action := range []string{"guest-command", "available-guest-cmds"} {
			if got, ok := guestRequestVM(r.Path, action); ok && got == id {
				n++
			}
		}
	}
	return n
}

// TestGuestCheckerWindowsGuests: where the platform refuses guest commands for Windows (the
// spec, and the simulator's default), those VMs are unsupported: no series, out of the coverage,
// one not_supported error each, no more requests within osinfo_interval, the collector healthy.
// Where it accepts them, Windows guests are checked like Linux ones.
func TestGuestCheckerWindowsGuests(t *testing.T) {
	for _, c := range []struct {
		name            string
		platformAllows  bool
		wantUnsupported bool
	}{
		{"platform refuses Windows: unsupported", false, true},
		{"platform accepts Windows: checked", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := guestSimOptions(6)
			o.LinuxFraction = 0.5
			o.GuestCommandsWindows = c.platformAllows
			cfg := guestTestConfig() // osinfo_interval 1m: no probe again during the test
			e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg})
			var windows, linux []string
			for _, id := range e.eligibleIDs() {
				if d, _ := e.sim.Domain(id); d.Linux {
					linux = append(linux, id)
				} else {
					windows = append(windows, id)
				}
			}
			if len(windows) == 0 || len(linux) == 0 {
				t.Fatalf("need both kinds, got %d windows, %d linux", len(windows), len(linux))
			}
			e.waitSweeps(2, 5*time.Second)
			e.sim.ResetRequests()
			e.waitSweeps(3, 5*time.Second)
			reqs := e.sim.Requests()
			for _, id := range linux {
				if v, _ := e.value("veil_guest_ping_success", "domain_id", id); v != 1 {
					t.Errorf("linux %s ping_success = %v, want 1", id, v)
				}
			}
			notSupported, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "not_supported")
			unsupported, _ := e.value("veil_guest_unsupported_domains")
			eligible, _ := e.value("veil_guest_eligible_domains")
			checked, _ := e.value("veil_guest_checked_domains")
			st := e.gc.Status()
			if !c.wantUnsupported {
				for _, id := range windows {
					if v, _ := e.value("veil_guest_ping_success", "domain_id", id); v != 1 {
						t.Errorf("windows %s ping_success = %v, want 1", id, v)
					}
				}
				all := float64(len(windows) + len(linux))
				if unsupported != 0 || eligible != all || checked != all || notSupported != 0 {
					t.Errorf("unsupported %v, eligible %v, checked %v, not_supported errors %v; want 0, %v, %v, 0",
						unsupported, eligible, checked, notSupported, all, all)
				}
				if st.Unsupported != 0 || st.Eligible != len(windows)+len(linux) {
					t.Errorf("Status() = %+v, want every VM eligible, none unsupported", st)
				}
				return
			}
			for _, id := range windows {
				if ks := e.guestSeriesOf(id); len(ks) > 0 {
					t.Errorf("unsupported windows %s has series %v, want none", id, ks)
				}
				if n := guestRequestsTo(reqs, id); n != 0 {
					t.Errorf("%d requests to unsupported windows %s within osinfo_interval, want 0", n, id)
				}
			}
			if notSupported != float64(len(windows)) {
				t.Errorf("command_errors_total{guest-ping,not_supported} = %v after 5 sweeps, want %d: once per VM", notSupported, len(windows))
			}
			if unsupported != float64(len(windows)) || eligible != float64(len(linux)) || checked != float64(len(linux)) {
				t.Errorf("unsupported %v, eligible %v, checked %v; want %d, %d, %d",
					unsupported, eligible, checked, len(windows), len(linux), len(linux))
			}
			if st.Unsupported != len(windows) || st.Eligible != len(linux) || st.Checked != len(linux) {
				t.Errorf("Status() = %+v, want %d unsupported, %d eligible and checked", st, len(windows), len(linux))
			}
			if v, _ := e.value("veil_collector_success", "collector", "guest"); v != 1 {
				t.Errorf("collector_success = %v, want 1: a refusal for one VM is not a controller failure", v)
			}
		})
	}
}

// guestRefusingFront answers guest-command for the VMs in refuse as a Linux-only platform does,
// counting the refusals in refused.
func guestRefusingFront(mu *sync.Mutex, refuse map[string]bool, refused *int) func(http.Handler) http.Handler {
	return func(sim http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, ok := guestRequestVM(r.URL.Path, "guest-command")
			mu.Lock()
			no := ok && refuse[id]
			if no {
				*refused++
			}
			mu.Unlock()
			if !no {
				sim.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"errors":[{"code":"400","msg_key":"detail","detail":"Guest commands are available for Linux guests only."}]}`)
		})
	}
}

// TestGuestCheckerProbesUnsupportedVMsAgain: an unsupported VM is asked again after
// osinfo_interval (and only then), with one error in all, and is checked normally once the
// platform accepts its commands; an agent that reconnects is probed at once.
func TestGuestCheckerProbesUnsupportedVMsAgain(t *testing.T) {
	t.Run("after osinfo_interval", func(t *testing.T) {
		var mu sync.Mutex
		refuse := map[string]bool{}
		refused := 0
		cfg := guestTestConfig()
		cfg.OSInfoInterval = time.Second
		e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(2), cfg: cfg, front: guestRefusingFront(&mu, refuse, &refused),
			before: func(e *guestEnv) { refuse[e.sim.DomainIDs()[0]] = true }})
		id := e.sim.DomainIDs()[0]
		e.eventually("the VM marked unsupported", 5*time.Second, func() bool {
			v, _ := e.value("veil_guest_unsupported_domains")
			return v == 1
		})
		mu.Lock()
		refused = 0
		mu.Unlock()
		time.Sleep(2500 * time.Millisecond) // two probes, 1s apart
		mu.Lock()
		pings := refused
		mu.Unlock()
		if pings < 1 || pings > 3 {
			t.Errorf("%d pings to the unsupported VM in 2.5s with osinfo_interval 1s, want about 2", pings)
		}
		if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "not_supported"); v != 1 {
			t.Errorf("command_errors_total{guest-ping,not_supported} = %v after probes, want 1", v)
		}
		if ks := e.guestSeriesOf(id); len(ks) > 0 {
			t.Errorf("series of the unsupported VM: %v", ks)
		}
		mu.Lock()
		delete(refuse, id)
		mu.Unlock()
		e.eventually("the VM checked again", 5*time.Second, func() bool {
			v, ok := e.value("veil_guest_ping_success", "domain_id", id)
			_, os := e.value("veil_guest_clock_offset_seconds", "domain_id", id)
			return ok && v == 1 && os
		})
		if v, _ := e.value("veil_guest_unsupported_domains"); v != 0 {
			t.Errorf("unsupported_domains = %v after the platform accepted the VM, want 0", v)
		}
		e.waitSweeps(1, 5*time.Second)
		if st := e.gc.Status(); st.Eligible != 2 || st.Checked != 2 || st.Unsupported != 0 {
			t.Errorf("Status() = %+v, want 2 eligible and checked", st)
		}
	})
	t.Run("when the agent reconnects", func(t *testing.T) {
		o := guestSimOptions(4)
		o.LinuxFraction = 0.5
		cfg := guestTestConfig()
		cfg.OSInfoInterval = time.Hour
		e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg})
		var win string
		for _, id := range e.eligibleIDs() {
			if d, _ := e.sim.Domain(id); !d.Linux {
				win = id
			}
		}
		if win == "" {
			t.Fatal("no windows VM")
		}
		e.waitSweeps(2, 5*time.Second)
		before, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "not_supported")
		must(t, e.sim.SetGuestAgent(win, false))
		e.refresh()
		e.eventually("the checker to drop the VM", 5*time.Second, func() bool {
			e.gc.mu.Lock()
			defer e.gc.mu.Unlock()
			return e.gc.vms[win] == nil
		})
		must(t, e.sim.SetGuestAgent(win, true))
		e.sim.ResetRequests()
		e.refresh()
		e.eventually("a probe of the reconnected agent", 5*time.Second, func() bool {
			return countCmd(guestCmdsSent(t, e.sim.Requests())[win], guestCmdPing) >= 1
		})
		e.waitSweeps(1, 5*time.Second)
		if v, _ := e.value("veil_guest_unsupported_domains"); v < 1 {
			t.Errorf("unsupported_domains = %v after the probe, want the VM marked again", v)
		}
		if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "not_supported"); v != before+1 {
			t.Errorf("not_supported errors %v -> %v, want one more for the new connection", before, v)
		}
	})
}

// TestGuestCheckerPausesVMsThePlatformSaysAreStopped: a VM that stopped after the inventory was
// read answers "not running": one agent_not_running error, then no series, no coverage and no
// requests until a newer inventory snapshot says it runs.
func TestGuestCheckerPausesVMsThePlatformSaysAreStopped(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(3), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	id := ids[0]
	e.waitSweeps(1, 5*time.Second)
	must(t, e.sim.PowerOff(id)) // the inventory snapshot still says it runs
	e.eventually("an agent_not_running error", 5*time.Second, func() bool {
		v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "agent_not_running")
		return v >= 1
	})
	e.waitSweeps(1, 5*time.Second)
	e.sim.ResetRequests()
	e.waitSweeps(3, 5*time.Second)
	if n := guestRequestsTo(e.sim.Requests(), id); n != 0 {
		t.Errorf("%d requests to the stopped VM on the same snapshot, want 0", n)
	}
	if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "agent_not_running"); v != 1 {
		t.Errorf("agent_not_running errors = %v, want 1", v)
	}
	if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "api_error"); v != 0 {
		t.Errorf("api_error errors = %v, want 0", v)
	}
	if ks := e.guestSeriesOf(id); len(ks) > 0 {
		t.Errorf("series of the stopped VM: %v", ks)
	}
	if st := e.gc.Status(); st.Eligible != len(ids)-1 || st.Checked != len(ids)-1 {
		t.Errorf("Status() = %+v, want %d eligible and checked", st, len(ids)-1)
	}
	if v, _ := e.value("veil_collector_success", "collector", "guest"); v != 1 {
		t.Errorf("collector_success = %v, want 1", v)
	}
	// A newer snapshot that says it runs brings it back.
	must(t, e.sim.PowerOn(id))
	e.refresh()
	e.eventually("the VM checked again", 5*time.Second, func() bool {
		v, ok := e.value("veil_guest_ping_success", "domain_id", id)
		return ok && v == 1
	})
}

func TestGuestErrorReasonOfPlatformRefusals(t *testing.T) {
	for _, c := range []struct {
		name, msg, want string
	}{
		{"VM stopped since the inventory", "Virtual machine web-1 is not running.", "agent_not_running"},
		{"VM stopped, name with timeout in it", "Virtual machine timeout-lab is not running.", "agent_not_running"},
		{"agent not active", "Guest agent of virtual machine web-1 is not active.", "agent_not_running"},
		{"Linux only", "Guest commands are available for Linux guests only.", "not_supported"},
		{"agent timeout", "guest agent timeout: command guest-ping got no answer within 5s", "timeout"},
		{"other refusal", "Something else went wrong.", "api_error"},
	} {
		err := fmt.Errorf("wrapped: %w", &veil.APIError{StatusCode: 400, Code: "400", MsgKey: "detail", Message: c.msg})
		if got := veil.GuestErrorReason(err); got != c.want {
			t.Errorf("%s: GuestErrorReason(%q) = %q, want %q", c.name, c.msg, got, c.want)
		}
	}
}

func TestGuestCheckerControllerErrorsFailTheCollector(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(3), cfg: guestTestConfig()})
	e.waitSweeps(1, 5*time.Second)
	e.sim.SetFaults(veiltest.Fault{Path: "/api/domains/*/guest-command/", Kind: "status", Status: 500})
	e.waitSweeps(2, 5*time.Second)
	if v, _ := e.value("veil_collector_success", "collector", "guest"); v != 0 {
		t.Errorf("collector_success = %v with every guest command answered 500, want 0", v)
	}
	if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "api_error"); v < 1 {
		t.Errorf("command_errors_total{guest-ping,api_error} = %v, want >= 1", v)
	}
	last, _ := e.value("veil_collector_last_success_timestamp_seconds", "collector", "guest")
	if last <= 0 {
		t.Errorf("last_success_timestamp = %v, want the end of the sweep before the faults", last)
	}
	e.sim.ClearFaults()
	e.waitSweeps(2, 5*time.Second)
	if v, _ := e.value("veil_collector_success", "collector", "guest"); v != 1 {
		t.Errorf("collector_success = %v after the controller recovered, want 1", v)
	}
	if now, _ := e.value("veil_collector_last_success_timestamp_seconds", "collector", "guest"); now <= last {
		t.Errorf("last_success_timestamp did not advance after recovery: %v <= %v", now, last)
	}
}

// guestForbidden are commands that change a guest; the exporter must never send them.
var guestForbidden = []string{
	"guest-exec", "guest-exec-status", "guest-file-open", "guest-file-read", "guest-file-write",
	"guest-file-seek", "guest-file-flush", "guest-file-close", "guest-set-user-password",
	"guest-suspend-ram", "guest-suspend-disk", "guest-suspend-hybrid", "guest-shutdown",
	"guest-fsfreeze-freeze", "guest-fsfreeze-freeze-list", "guest-fsfreeze-thaw", "guest-fsfreeze-status",
	"guest-ssh-add-authorized-keys", "guest-ssh-remove-authorized-keys", "guest-set-time", "guest-set-vcpus",
	"guest-set-memory-blocks", "guest-fstrim",
}

func TestGuestCommandAllowlistOnlyReadOnly(t *testing.T) {
	for _, cmd := range guestForbidden {
		if guestCommandAllowed(cmd) {
			t.Errorf("%s is allowed; it changes the guest", cmd)
		}
	}
	for _, cmd := range []string{"guest-ping", "guest-info", "guest-get-osinfo", "guest-get-fsinfo",
		"guest-get-time", "guest-get-host-name", "guest-network-get-interfaces"} {
		if !guestCommandAllowed(cmd) {
			t.Errorf("read-only %s is refused", cmd)
		}
	}
	// Through the checker's only sending path: refused before any request is made.
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(1), cfg: guestTestConfig()})
	id := e.eligibleIDs()[0]
	e.sim.ResetRequests()
	for _, cmd := range guestForbidden {
		if _, err := e.gc.call(context.Background(), id, cmd); !errors.Is(err, errGuestCommandRefused) {
			t.Errorf("call(%s) = %v, want errGuestCommandRefused", cmd, err)
		}
	}
	for _, cmds := range guestCmdsSent(t, e.sim.Requests()) {
		for _, c := range cmds {
			if slices.Contains(guestForbidden, c) {
				t.Errorf("%s reached the platform", c)
			}
		}
	}
}

func TestGuestCheckerSendsOnlyAllowlistedCommands(t *testing.T) {
	o := guestSimOptions(6)
	o.LinuxFraction = 0.5
	o.GuestCommandsWindows = true
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: guestTestConfig()})
	e.waitSweeps(3, 5*time.Second)
	sent := guestCmdsSent(t, e.sim.Requests())
	if len(sent) == 0 {
		t.Fatal("no guest commands in the request log")
	}
	seen := map[string]int{}
	for _, cmds := range sent {
		for _, c := range cmds {
			seen[c]++
			if !guestCommandAllowed(c) {
				t.Errorf("sent %s, outside the allowlist", c)
			}
		}
	}
	for _, c := range []string{guestCmdPing, guestCmdOSInfo, guestCmdFSInfo, guestCmdTime} {
		if seen[c] == 0 {
			t.Errorf("%s never sent", c)
		}
	}
}

func TestGuestCheckerNeverSendsCommandsTheGuestDoesNotOffer(t *testing.T) {
	// An older agent that offers ping and fsinfo only.
	offered := []string{guestCmdPing, guestCmdFSInfo, "guest-sync"}
	front := func(sim http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := guestRequestVM(r.URL.Path, "available-guest-cmds"); ok {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{"qemu_available_cmds": offered})
				return
			}
			sim.ServeHTTP(w, r)
		})
	}
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(2), cfg: guestTestConfig(), front: front})
	e.waitSweeps(3, 5*time.Second)
	sent := guestCmdsSent(t, e.sim.Requests())
	for _, id := range e.eligibleIDs() {
		cmds := sent[id]
		if countCmd(cmds, guestCmdPing) == 0 || countCmd(cmds, guestCmdFSInfo) == 0 {
			t.Errorf("%s: sent %v, want pings and fsinfo", id, cmds)
		}
		for _, c := range cmds {
			if !slices.Contains(offered, c) {
				t.Errorf("%s: sent %s, which the guest does not offer", id, c)
			}
		}
		if v, _ := e.value("veil_guest_ping_success", "domain_id", id); v != 1 {
			t.Errorf("%s: ping_success = %v, want 1", id, v)
		}
	}
}

// stallWatch records when this process ran a goroutine that wants to wake every millisecond
// late, and by how much. A request whose rate-limiter permit falls due during such a stall
// goes out when it ends, together with the others that fell due.
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall
	stop   chan struct{}
	done   chan struct{}
}

type stall struct {
	end time.Time
	len time.Duration
}

func startStallWatch() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		const tick = time.Millisecond
		last := time.Now()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(tick):
			}
			now := time.Now()
			if late := now.Sub(last) - tick; late > tick {
				w.mu.Lock()
				w.stalls = append(w.stalls, stall{now, late})
				w.mu.Unlock()
			}
			last = now
		}
	}()
	return w
}

// Stop ends the watch.
func (w *stallWatch) Stop() {
	close(w.stop)
	<-w.done
}

// longest is the longest stall that ended within [from, to]: the most by which a request that
// arrived then can have been late.
func (w *stallWatch) longest(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		if !s.end.Before(from) && !s.end.After(to) {
			d = max(d, s.len)
		}
	}
	return d
}

// TestGuestCheckerStaysWithinBudget: demand (25 VMs pinged every 200ms) far above the budget
// of 50 requests/s. Arrival times in the simulator's log (Request.Start is taken when the
// request reaches the handler) must show
//   - from the start, never more than the limiter allows: 1 + budget × elapsed (burst 1); a
//     late sender only delays requests, so this holds exactly whatever the scheduling;
//   - in every one-second window at most budget +5% (the criterion) — unless the process
//     itself stalled: the limiter schedules permits 1/budget apart, but a goroutine waiting for
//     one wakes late when the process is not run, and every permit that fell due during a
//     stall S goes out together when it ends (seen in the log as gaps like "73 0 0" ms). The
//     window bound is then 1 + budget × (1s + S), S the longest stall a watchdog saw end
//     inside that window;
//   - at most cfg.Concurrency requests in flight, never two calls to one VM at once, and
//     sweeps that stretch instead of piling up.
func TestGuestCheckerStaysWithinBudget(t *testing.T) {
	const budget = 50.0
	o := guestSimOptions(25)
	o.Latency = 20 * time.Millisecond
	cfg := guestTestConfig()
	cfg.Concurrency = 4
	watch := startStallWatch()
	t0 := time.Now() // before the client exists: no permit of the budget precedes it
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg, rate: budget, concurrency: 8})
	n := len(e.eligibleIDs())
	e.waitSweeps(2, 10*time.Second)
	time.Sleep(time.Second)
	reqs := e.sim.Requests()
	watch.Stop()
	if len(reqs) < int(budget) {
		t.Fatalf("only %d requests logged", len(reqs))
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].Start.Before(reqs[j].Start) })
	perReq := time.Duration(float64(time.Second) / budget)
	for k, r := range reqs {
		// The k-th request (0-based) cannot have had its permit before t0 + k/budget.
		if early := t0.Add(time.Duration(k) * perReq).Sub(r.Start); early > time.Millisecond {
			t.Errorf("request %d arrived %s after the start, %s before the budget allowed it", k+1, r.Start.Sub(t0), early)
			break
		}
	}
	worst, j, failed := 0, 0, false
	var stalled time.Duration // longest stall ending in a window over budget +5%
	for i := range reqs {
		for reqs[i].Start.Sub(reqs[j].Start) >= time.Second {
			j++
		}
		count := i - j + 1
		worst = max(worst, count)
		if float64(count) <= budget*1.05 || failed {
			continue
		}
		// A stall that ended just before the window still delivers its late requests into it:
		// the handlers run a little after the watchdog does.
		s := watch.longest(reqs[j].Start.Add(-100*time.Millisecond), reqs[i].Start)
		stalled = max(stalled, s)
		if limit := 1 + budget*(time.Second+s).Seconds(); float64(count) > limit {
			failed = true
			var gaps []int64
			for k := j + 1; k <= i; k++ {
				gaps = append(gaps, reqs[k].Start.Sub(reqs[k-1].Start).Milliseconds())
			}
			t.Errorf("one-second window from %s has %d requests, budget %v: over +5%% and over 1 + budget × (1s + stall %s) = %.1f; gaps in ms %v",
				reqs[j].Start.Sub(t0), count, budget, s, limit, gaps)
		}
	}
	t.Logf("%d requests; busiest one-second window %d (budget +5%% = %.1f; longest stall in a window over it %s); in flight max %d; sweep %s",
		len(reqs), worst, budget*1.05, stalled, e.sim.InFlightMax(), e.gc.Status().SweepDuration)
	if m := e.sim.InFlightMax(); m > cfg.Concurrency {
		t.Errorf("InFlightMax = %d, want <= concurrency %d", m, cfg.Concurrency)
	}
	// One VM is never checked by two workers at once.
	byVM := map[string][]veiltest.Request{}
	for _, r := range reqs {
		for _, action := range []string{"guest-command", "available-guest-cmds"} {
			if id, ok := guestRequestVM(r.Path, action); ok {
				byVM[id] = append(byVM[id], r)
			}
		}
	}
	for id, rs := range byVM {
		for k := 1; k < len(rs); k++ {
			if rs[k].Start.Before(rs[k-1].Start.Add(rs[k-1].Duration)) {
				t.Errorf("VM %s had overlapping requests at %s", id, rs[k].Start.Format(time.StampMicro))
				break
			}
		}
	}
	st := e.gc.Status()
	floor := time.Duration(float64(n) / budget * float64(time.Second))
	if st.SweepDuration < floor*9/10 || st.SweepDuration <= cfg.PingInterval {
		t.Errorf("sweep took %s; with %d VMs and %v req/s it cannot be under %s and must stretch past the %s interval",
			st.SweepDuration, n, budget, floor, cfg.PingInterval)
	}
	if st.Checked != n {
		t.Errorf("checked %d of %d VMs", st.Checked, n)
	}
	if v, _ := e.value("veil_guest_sweep_duration_seconds"); math.Abs(v-st.SweepDuration.Seconds()) > 1e-9 {
		t.Errorf("sweep_duration_seconds = %v, Status says %s", v, st.SweepDuration)
	}
	e.gc.mu.Lock()
	queued := len(e.gc.queue)
	e.gc.mu.Unlock()
	if queued > n {
		t.Errorf("%d entries queued for %d VMs: work piles up", queued, n)
	}
}

// TestGuestCheckerBoundsConcurrency: without a rate limit and with slow answers, the checker
// keeps exactly cfg.Concurrency calls in flight, never more, although the client allows 16.
func TestGuestCheckerBoundsConcurrency(t *testing.T) {
	o := guestSimOptions(30)
	o.Latency = 50 * time.Millisecond
	cfg := guestTestConfig()
	cfg.Concurrency = 4
	e := newGuestEnv(t, guestEnvOpts{sim: o, cfg: cfg, concurrency: 16})
	e.waitSweeps(1, 10*time.Second)
	m := e.sim.InFlightMax()
	t.Logf("in flight max %d", m)
	if m > cfg.Concurrency {
		t.Errorf("InFlightMax = %d, want <= concurrency %d", m, cfg.Concurrency)
	}
	if m < cfg.Concurrency {
		t.Errorf("InFlightMax = %d: demand exceeds capacity, yet fewer than %d calls ran at once", m, cfg.Concurrency)
	}
}

// TestGuestCheckerSpreadsPingsOverTheInterval: with no budget to hide a burst, pings of 100 VMs
// must come spread over the interval, not all at its start.
func TestGuestCheckerSpreadsPingsOverTheInterval(t *testing.T) {
	cfg := guestTestConfig()
	cfg.PingInterval = time.Second
	cfg.FSInfoInterval, cfg.TimeInterval, cfg.OSInfoInterval = time.Hour, time.Hour, time.Hour
	cfg.Concurrency = 16
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(100), cfg: cfg})
	e.waitSweeps(1, 5*time.Second)
	e.sim.ResetRequests()
	time.Sleep(2 * time.Second)
	var pings []time.Time
	for _, r := range e.sim.Requests() {
		if _, ok := guestRequestVM(r.Path, "guest-command"); ok && strings.Contains(r.Body, `"guest-ping"`) {
			pings = append(pings, r.Start)
		}
	}
	if len(pings) < 150 {
		t.Fatalf("%d pings in 2s for 100 VMs every second, want about 200", len(pings))
	}
	const buckets = 10 // 200ms each
	counts := make([]int, buckets)
	start := pings[0]
	for _, p := range pings {
		if k := int(p.Sub(start) / (200 * time.Millisecond)); k < buckets {
			counts[k]++
		}
	}
	mean := float64(len(pings)) / buckets
	t.Logf("pings per 200ms: %v", counts)
	for k, c := range counts {
		if float64(c) > 2*mean {
			t.Errorf("bucket %d has %d pings, mean %.1f: calls burst instead of spreading (%v)", k, c, mean, counts)
		}
	}
}

func TestGuestPhaseSpreadsIDsEvenly(t *testing.T) {
	const n, buckets = 10000, 10
	counts := make([]int, buckets)
	for i := range n {
		p := guestPhase(fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i*7919, i))
		if p < 0 || p >= 1 {
			t.Fatalf("phase %v outside [0,1)", p)
		}
		counts[int(p*buckets)]++
	}
	for k, c := range counts {
		if c < n/buckets*85/100 || c > n/buckets*115/100 {
			t.Errorf("bucket %d has %d of %d ids: %v", k, c, n, counts)
		}
	}
	if guestPhase("a") != guestPhase("a") {
		t.Error("phase is not stable")
	}
}

func TestGuestScheduleSlots(t *testing.T) {
	base := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	iv := 10 * time.Second
	cases := []struct {
		name  string
		got   time.Time
		want  time.Time
		phase float64
	}{
		{"next slot at phase after t", guestNextSlot(base.Add(time.Second), iv, 0.5), base.Add(5 * time.Second), 0.5},
		{"slot already passed this interval", guestNextSlot(base.Add(6*time.Second), iv, 0.5), base.Add(15 * time.Second), 0.5},
		{"t on the slot", guestNextSlot(base.Add(5*time.Second), iv, 0.5), base.Add(5 * time.Second), 0.5},
		{"on time: one interval later", guestAdvance(base.Add(5*time.Second), iv, 0.5, base.Add(5500*time.Millisecond)), base.Add(15 * time.Second), 0.5},
		{"late: next slot from now, no catching up", guestAdvance(base.Add(5*time.Second), iv, 0.5, base.Add(31*time.Second)), base.Add(35 * time.Second), 0.5},
	}
	for _, c := range cases {
		if !c.got.Equal(c.want) {
			t.Errorf("%s: got %s, want %s", c.name, c.got.Format(time.TimeOnly), c.want.Format(time.TimeOnly))
		}
	}
}

func TestGuestFilesystemsFilter(t *testing.T) {
	num := func(v float64) *veil.Number { n := veil.Number(v); return &n }
	in := []veil.GuestFilesystem{
		{Name: "vda1", Mountpoint: "/", Type: "ext4", TotalBytes: num(100), UsedBytes: num(40)},
		{Name: "vda1", Mountpoint: "/", Type: "ext4", TotalBytes: num(100), UsedBytes: num(40)}, // bind mount twice
		{Name: "tmpfs", Mountpoint: "/run", Type: "tmpfs", TotalBytes: num(10), UsedBytes: num(1)},
		{Name: "loop0", Mountpoint: "/snap/x", Type: "squashfs"},
		{Name: "vdb", Mountpoint: "/data", Type: "xfs", TotalBytes: num(500)}, // used missing
	}
	got := guestFilesystems(in, []string{"tmpfs"})
	want := []guestFS{{mountpoint: "/", fstype: "ext4", device: "vda1", size: 100, used: 40}}
	if !slices.Equal(got, want) {
		t.Errorf("guestFilesystems = %+v, want %+v", got, want)
	}
}

func TestGuestNanos(t *testing.T) {
	cases := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1714564800123456789", 1714564800123456789, false},
		{"1.7145648e18", 1714564800000000000, false},
		{`"x"`, 0, true},
		{"{}", 0, true},
	}
	for _, c := range cases {
		got, err := guestNanos([]byte(c.in))
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("guestNanos(%s) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

// TestGuestRescheduleOfADownAgentWaitsForItsPing: checks due before the ping of an agent that
// missed its last one are not sent; they must not bring the VM back to a worker before the ping,
// or it would cycle through the workers doing nothing until then.
func TestGuestRescheduleOfADownAgentWaitsForItsPing(t *testing.T) {
	g := NewGuestChecker("x", nil, guestTestConfig(), func() []veil.Domain { return nil }, nil)
	now := time.Now()
	for _, c := range []struct {
		name string
		down bool
		want time.Time
	}{
		{"agent down: next visit at the ping", true, now.Add(time.Second)},
		{"agent up: fsinfo and time when due", false, now.Add(-time.Second)},
	} {
		v := &guestVM{id: c.name, agentDown: c.down, nextPing: now.Add(time.Second),
			nextFS: now.Add(-time.Second), nextTime: now.Add(-time.Second), os: &veil.GuestOSInfo{}}
		g.mu.Lock()
		g.reschedule(v, now, checkPlan{})
		g.mu.Unlock()
		if got := v.due(); !got.Equal(c.want) {
			t.Errorf("%s: next visit in %s, want %s", c.name, got.Sub(now), c.want.Sub(now))
		}
	}
}
