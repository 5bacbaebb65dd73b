package guest

import (
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestGuestProblemsNameSilentAgentsAndSkewedClocks: a hung agent and a clock 5 s off are listed
// by VM name; healthy guests are not; a guest's state (agent not running) reads as a state in
// the last error, not as a failure.
func TestGuestProblemsNameSilentAgentsAndSkewedClocks(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(4), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	e.waitSweeps(1, 5*time.Second)
	if err := e.sim.SetGuestHang(ids[0], true); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetClockOffset(ids[1], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ids[0]: "guest", ids[1]: "clock"}
	e.eventually("the silent guest and the skewed clock listed", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		if len(ps) != len(want) {
			return false
		}
		for _, p := range ps {
			if want[p.ID] != p.Kind || !p.Failure || p.Name == p.ID {
				return false
			}
		}
		return true
	})
	if err := e.sim.SetGuestHang(ids[0], false); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetGuestAgent(ids[2], false); err != nil {
		t.Fatal(err)
	}
	e.eventually("the agent-not-running state is the last one, named", 10*time.Second, func() bool {
		st := e.gc.Status()
		return st.LastErrorDomainID == ids[2] && st.LastErrorReason == "agent_not_running" && st.LastIsState && st.LastErrorDomain != ids[2]
	})
}

// TestGuestProblemsNotListedWhileTheControllerFails: while the controller answers 500 to guest
// commands every ping fails, which says nothing of the guests: the list holds none of them (as
// the alert holds back), and lists the silent guest again once the controller answers.
func TestGuestProblemsNotListedWhileTheControllerFails(t *testing.T) {
	e := newGuestEnv(t, guestEnvOpts{sim: guestSimOptions(4), cfg: guestTestConfig()})
	ids := e.eligibleIDs()
	e.waitSweeps(1, 5*time.Second)
	if err := e.sim.SetGuestHang(ids[0], true); err != nil {
		t.Fatal(err)
	}
	e.eventually("the silent guest listed", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		return len(ps) == 1 && ps[0].ID == ids[0]
	})
	e.sim.SetFaults(veiltest.Fault{Path: "/api/domains/*/guest-command/", Kind: "status", Status: 500})
	e.eventually("the guest collector failing and no guest listed", 10*time.Second, func() bool {
		return !e.gc.RunStatus()[0].Success && len(e.gc.Problems()) == 0
	})
	for _, p := range e.gc.Problems() {
		t.Errorf("listed while the controller fails: %+v", p)
	}
	e.sim.ClearFaults()
	e.eventually("the silent guest listed again", 10*time.Second, func() bool {
		ps := e.gc.Problems()
		return e.gc.RunStatus()[0].Success && len(ps) == 1 && ps[0].ID == ids[0]
	})
}
