package collector

import (
	"testing"

	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestInventoryRenderedIsCollected: the series rendered at a refresh are byte for byte what
// client_golang writes for the same snapshot collected live (names with spaces and quotes,
// tags, empty labels, backups, tasks), before the first refresh and after each.
func TestInventoryRenderedIsCollected(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 3, VMs: 300, Nodes: 7, Datapools: 4, Clusters: 2, InitialTasks: 200}, testCollect(), veil.Config{})
	expotest.SameText(t, "before the first refresh", expotest.RenderedText(t, f.inv.Rendered()), expotest.LiveText(t, f.inv.CollectRendered), "veil_up")
	for i := range 3 {
		f.mustRefresh(t)
		expotest.SameText(t, "refresh "+string(rune('1'+i)), expotest.RenderedText(t, f.rendered(t)), expotest.LiveText(t, f.inv.CollectRendered),
			"veil_domain_info{", "veil_node_info{", "veil_datapool_free_bytes{", "veil_tasks{", `tags="`, "veil_controller_info{")
		// The platform moves on: a VM stops, one is deleted, VMs are added, a node changes.
		ids := f.sim.DomainIDs()
		mustDo(t, f.sim.PowerOff(ids[i]))
		mustDo(t, f.sim.DeleteVM(ids[10+i]))
		f.sim.AddVMs(5)
		mustDo(t, f.sim.SetNodeStatus(f.sim.NodeIDs()[i], "ERROR"))
	}
}
