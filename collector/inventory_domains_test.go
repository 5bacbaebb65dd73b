package collector

import (
	"fmt"
	"math/rand/v2"
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
// rendered text is what client_golang writes for the snapshot collected live, and so after
// each of random power changes, migrations, deletes and VMs added.
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
	// Random changes, each rendered by patching the families it touched from the last render.
	rng := rand.New(rand.NewPCG(21, 1))
	for i := range 30 {
		var vms []string
		for _, d := range f.inv.Domains() {
			if !d.Template {
				vms = append(vms, d.ID)
			}
		}
		id := vms[rng.IntN(len(vms))]
		var err error
		switch op := rng.IntN(4); op {
		case 0:
			toggle(t, f.sim, id)
		case 1:
			nodes := f.sim.NodeIDs()
			err = f.sim.MigrateVM(id, nodes[rng.IntN(len(nodes))])
		case 2:
			err = f.sim.DeleteVM(id)
		case 3:
			f.sim.AddVMs(1 + rng.IntN(3))
		}
		if err != nil {
			t.Fatal(err)
		}
		waitFor(fmt.Sprintf("change %d", i))
	}
}
