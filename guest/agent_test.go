package guest

// Guest checker tests: agents that hang, reconnect or are refused, VMs the platform says are
// stopped, and failures of the controller.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

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
	if v := e.runStatus().Success; !v {
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
			if v := e.runStatus().Success; !v {
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
		// Probe slots are osinfo_interval apart and none goes before its slot; the first after
		// the reset may be late from the slot before: the third then comes at least one
		// interval after the reset (probing at every ping would take two ping intervals).
		reset := time.Now()
		e.eventually("three more probes of the unsupported VM", 5*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return refused >= 3
		})
		if took := time.Since(reset); took < cfg.OSInfoInterval {
			t.Errorf("three probes of the unsupported VM within %s, osinfo_interval %s: probed before it is due", took, cfg.OSInfoInterval)
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
}

// TestGuestCheckerProbesUnsupportedVMsAgainOnReconnect: an unsupported VM is probed again when its
// agent reconnects.
func TestGuestCheckerProbesUnsupportedVMsAgainOnReconnect(t *testing.T) {
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
	if v := e.runStatus().Success; !v {
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

// TestGuestReasonLabelsOfTypedErrors: the reason label comes from the client's typed errors,
// with the values the metric has always had.
func TestGuestReasonLabelsOfTypedErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("guest command guest-ping on x: %w", veil.ErrGuestTimeout), "timeout"},
		{fmt.Errorf("wrapped: %w", veil.ErrAgentNotRunning), "agent_not_running"},
		{fmt.Errorf("wrapped: %w", veil.ErrGuestUnsupported), "not_supported"},
		{&veil.APIError{StatusCode: 500, Message: "guest agent timeout"}, "api_error"}, // not classified by the client: no text is parsed here
		{errors.New("veil: decoding guest-get-time result: \"x\" is not nanoseconds"), "api_error"},
	} {
		if got := guestReason(c.err); got != c.want {
			t.Errorf("guestReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestGuestCheckerControllerErrorsFailTheCollector(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(3), cfg: guestTestConfig()})
	e.waitSweeps(1, 5*time.Second)
	e.sim.SetFaults(veiltest.Fault{Path: "/api/domains/*/guest-command/", Kind: "status", Status: 500})
	e.waitSweeps(2, 5*time.Second)
	if v := e.runStatus().Success; v {
		t.Errorf("collector_success = %v with every guest command answered 500, want 0", v)
	}
	if v, _ := e.value("veil_guest_command_errors_total", "command", "guest-ping", "reason", "api_error"); v < 1 {
		t.Errorf("command_errors_total{guest-ping,api_error} = %v, want >= 1", v)
	}
	last := e.runStatus().LastSuccess
	if last.IsZero() {
		t.Errorf("last_success_timestamp = %v, want the end of the sweep before the faults", last)
	}
	e.sim.ClearFaults()
	e.waitSweeps(2, 5*time.Second)
	if v := e.runStatus().Success; !v {
		t.Errorf("collector_success = %v after the controller recovered, want 1", v)
	}
	if now := e.runStatus().LastSuccess; !now.After(last) {
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
