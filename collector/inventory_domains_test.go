package collector

import (
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestDomainFamiliesAreKeptWhileNothingTheyShowChanged: a pushed power change renders the VM
// families that show the power again and keeps the others as they were (the same Family); a
// tag changed renders veil_domain_info again, a VM deleted every VM family; after each the
// rendered text is what client_golang writes for the snapshot collected live.
func TestDomainFamiliesAreKeptWhileNothingTheyShowChanged(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 21, VMs: 40}, pushCollect(), veil.Config{})
	feed := runFeed(t, f)
	tu.Eventually(t, 10*time.Second, func() bool { return settled(f, feed) }, "push mode and the refresh after the connect")
	families := func() map[string]*exposition.Family {
		m := map[string]*exposition.Family{}
		for _, fam := range f.rendered(t).Families {
			m[fam.Name] = fam
		}
		return m
	}
	sameText := func(what string) {
		t.Helper()
		expotest.SameText(t, what, expotest.RenderedText(t, f.rendered(t)), expotest.LiveText(t, f.inv.CollectRendered), "veil_domain_info{", "veil_domain_power_state{")
	}
	// waitFor waits for the inventory to show the simulator's VMs, then for their render.
	waitFor := func(what string) {
		t.Helper()
		tu.Eventually(t, 10*time.Second, func() bool { return inSync(t, f) }, "%s pushed", what)
		sameText(what)
	}
	ids := f.sim.DomainIDs()
	before := families()
	toggle(t, f.sim, ids[3])
	waitFor("a power change")
	after := families()
	if after["veil_domain_power_state"] == before["veil_domain_power_state"] {
		t.Error("a power change kept veil_domain_power_state as it was")
	}
	for _, n := range []string{"veil_domain_info", "veil_domain_cpus", "veil_domain_memory_bytes"} {
		if after[n] == nil || after[n] != before[n] {
			t.Errorf("a power change rendered %s again", n)
		}
	}
	if err := f.sim.SetTags(ids[5], "a-new-tag"); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 10*time.Second, func() bool {
		return families()["veil_domain_info"] != after["veil_domain_info"]
	}, "veil_domain_info rendered again after a tag changed")
	sameText("a tag changed")
	before = families()
	if err := f.sim.DeleteVM(ids[7]); err != nil {
		t.Fatal(err)
	}
	waitFor("a VM deleted")
	for _, n := range []string{"veil_domain_info", "veil_domain_power_state", "veil_domain_cpus"} {
		if families()[n] == before[n] {
			t.Errorf("a VM deleted kept %s", n)
		}
	}
}
