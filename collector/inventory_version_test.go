package collector

import (
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// versionRequests counts the reads of the controller's version in the simulator's log.
func versionRequests(f *fixture) int {
	n := 0
	for _, r := range f.sim.Requests() {
		if r.Path == "/api/controllers/base-version/" {
			n++
		}
	}
	return n
}

// TestControllerVersionIsExportedAndFollowsUpgrades: veil_controller_info carries the version
// read at the first refresh; a new version is picked up at the next read — the 10th refresh
// after, or the first after an outage — and replaces the old series.
func TestControllerVersionIsExportedAndFollowsUpgrades(t *testing.T) {
	opts := smallInventory
	opts.ControllerVersion = "6.5.2"
	f := newFixture(t, opts, testCollect(), veil.Config{})
	f.mustRefresh(t)
	if v := value(t, f.inv, `veil_controller_info{controller="test",version="6.5.2"}`); v != "1" {
		t.Errorf("veil_controller_info = %s, want 1", v)
	}
	if r := runOf(t, f.inv, collVersion); !r.Success || r.Unavailable {
		t.Errorf("version run %+v, want a success", r)
	}
	if v := f.inv.Status().Version; v != "6.5.2" {
		t.Errorf("status version %q", v)
	}

	f.sim.SetControllerVersion("6.5.3")
	f.sim.ResetRequests()
	for range inventory.VersionEvery - 1 {
		f.mustRefresh(t)
	}
	if n := versionRequests(f); n != 0 {
		t.Fatalf("version read %d times before its turn", n)
	}
	if s := series(t, f.inv, "veil_controller_info"); len(s) != 1 || !strings.Contains(s[0], `version="6.5.2"`) {
		t.Errorf("between reads: %q, want the cached 6.5.2", s)
	}
	f.mustRefresh(t)
	if n := versionRequests(f); n != 1 {
		t.Fatalf("version read %d times at its turn, want 1", n)
	}
	if s := series(t, f.inv, "veil_controller_info"); len(s) != 1 || !strings.Contains(s[0], `version="6.5.3"`) {
		t.Errorf("after the upgrade: %q, want only 6.5.3", s)
	}

	// An upgrade with downtime: read again at the first refresh after the outage.
	f.sim.SetFaults(veiltest.Fault{Path: "/api/nodes/", Kind: "status", Status: 500})
	if err := f.refresh(t); err == nil {
		t.Fatal("refresh succeeded while nodes answered 500")
	}
	f.sim.SetControllerVersion("6.6.0")
	f.sim.ClearFaults()
	f.mustRefresh(t)
	if s := series(t, f.inv, "veil_controller_info"); len(s) != 1 || !strings.Contains(s[0], `version="6.6.0"`) {
		t.Errorf("after the outage: %q, want 6.6.0", s)
	}
}

// TestOlderControllerWithoutVersionIsNotAnOutage: a controller older than the endpoint answers
// 404: no veil_controller_info, the version reported unavailable, veil_up 1, asked again every
// 10th refresh; other failures of the endpoint are failures as for any collection.
func TestOlderControllerWithoutVersionIsNotAnOutage(t *testing.T) {
	opts := smallInventory
	opts.ControllerVersion = veiltest.NoControllerVersion
	f := newFixture(t, opts, testCollect(), veil.Config{})
	f.mustRefresh(t)
	if v := value(t, f.inv, "veil_up"); v != "1" {
		t.Errorf("veil_up = %s, want 1", v)
	}
	if s := series(t, f.inv, "veil_controller_info"); len(s) != 0 {
		t.Errorf("version of a controller without one: %q", s)
	}
	if r := runOf(t, f.inv, collVersion); r.Success || !r.Unavailable || !strings.Contains(r.Error, "404") {
		t.Errorf("version run %+v, want unavailable with the 404", r)
	}
	// Asked again at the 10th refresh after, not before: an upgrade may bring the endpoint.
	f.sim.SetControllerVersion("6.5.2")
	f.sim.ResetRequests()
	for range unavailableRetryEvery - 1 {
		f.mustRefresh(t)
	}
	if n := versionRequests(f); n != 0 {
		t.Fatalf("unavailable version asked %d times before its turn", n)
	}
	if r := runOf(t, f.inv, collVersion); !r.Unavailable {
		t.Errorf("a skipped refresh forgot the version is unavailable: %+v", r)
	}
	f.mustRefresh(t)
	if s := series(t, f.inv, "veil_controller_info"); len(s) != 1 || !strings.Contains(s[0], `version="6.5.2"`) {
		t.Errorf("after the endpoint came: %q", s)
	}
	logs := f.logs.String()
	if strings.Count(logs, "not available") != 1 || strings.Count(logs, "available again") != 1 || strings.Contains(logs, "down") {
		t.Errorf("want one line when it is missing, one when it comes, no outage:\n%s", logs)
	}

	g := newFixture(t, smallInventory, testCollect(), veil.Config{})
	g.sim.SetFaults(veiltest.Fault{Path: "/api/controllers/base-version/", Kind: "status", Status: 500})
	if err := g.refresh(t); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("refresh with the version answering 500: %v, want a failure naming it", err)
	}
	if v := value(t, g.inv, "veil_up"); v != "0" {
		t.Errorf("veil_up = %s, want 0 as for any collection that fails", v)
	}
	if r := runOf(t, g.inv, collVersion); r.Success || r.Unavailable {
		t.Errorf("version run %+v, want a failure", r)
	}
	g.sim.ClearFaults()
	g.mustRefresh(t) // a failed read is retried at the next refresh, not the 10th
	if s := series(t, g.inv, "veil_controller_info"); len(s) != 1 {
		t.Errorf("version not read again after a failure: %q", s)
	}
}
