package guest

// Guest checker tests: only read-only commands the guest offers are ever sent.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"
)

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
		send := func() error {
			_, err := e.client.GuestCommand(context.Background(), id, cmd, nil, time.Second)
			return err
		}
		if err := e.gc.cmds.call(context.Background(), id, cmd, send); !errors.Is(err, errGuestCommandRefused) {
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
