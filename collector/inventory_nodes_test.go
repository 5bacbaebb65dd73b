package collector

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/exposition/expotest"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// nodeFrame is a pushed frame of node n as the controller would send it after edit changed
// its fields (the list's names).
func nodeFrame(t *testing.T, event string, n veil.Node, edit func(o map[string]any)) veil.PushFrame {
	t.Helper()
	o := map[string]any{
		"id": n.ID, "verbose_name": n.VerboseName, "status": n.Status, "cpu_count": n.CPUCount, "memory_count": n.MemoryCount,
		"management_ip": n.ManagementIP, "domains_count": n.DomainsCount, "domains_on_count": n.DomainsOnCount,
		"cluster":               map[string]any{"id": n.Cluster.ID, "verbose_name": n.Cluster.VerboseName},
		"cpu_used_percent_user": n.CPUUsedPercentUser, "mem_used_percent_user": n.MemUsedPercentUser,
	}
	edit(o)
	obj, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return veil.PushFrame{Resource: "/nodes/", Event: event, ID: n.ID, Object: obj}
}

// TestNodeFamiliesArePatched: a node whose running VMs a push counted again changes
// veil_node_domains_running and keeps the node's other families as they were (the same
// Family); after it and after each of random pushed node changes (a status, a name, a usage
// gone or back, nodes added and deleted) the rendered text is what client_golang writes for the
// snapshot collected live.
func TestNodeFamiliesArePatched(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 5, VMs: 60, Nodes: 24}, pushCollect(), veil.Config{})
	f.mustRefresh(t)
	families := func() map[string]*exposition.Family {
		m := map[string]*exposition.Family{}
		for _, fam := range f.rendered(t).Families {
			m[fam.Name] = fam
		}
		return m
	}
	sameText := func(what string) {
		t.Helper()
		expotest.SameText(t, what, expotest.RenderedText(t, f.rendered(t)), expotest.LiveText(t, f.inv.CollectRendered), "veil_node_info{", "veil_node_domains_running{")
	}
	before := families()
	n := *f.inv.Snapshot().Nodes[3]
	f.inv.Apply([]veil.PushFrame{nodeFrame(t, veil.PushUpdated, n, func(o map[string]any) { o["domains_on_count"] = n.DomainsOnCount + 1 })})
	sameText("a node's running VMs")
	after := families()
	if after["veil_node_domains_running"] == before["veil_node_domains_running"] {
		t.Error("veil_node_domains_running kept as it was")
	}
	for _, name := range []string{"veil_node_info", "veil_node_status", "veil_node_domains", "veil_node_cpus"} {
		if after[name] == nil || after[name] != before[name] {
			t.Errorf("a node's running VMs rendered %s again", name)
		}
	}
	rng := rand.New(rand.NewPCG(5, 1))
	edits := []func(o map[string]any){
		func(o map[string]any) { o["status"] = []string{"ACTIVE", "ERROR", "SERVICE"}[rng.IntN(3)] },
		func(o map[string]any) { o["verbose_name"] = fmt.Sprintf("node \"%d\"", rng.IntN(1000)) },
		func(o map[string]any) { o["cpu_used_percent_user"] = nil },
		func(o map[string]any) { o["mem_used_percent_user"] = rng.IntN(100) },
		func(o map[string]any) { o["domains_count"], o["domains_on_count"] = rng.IntN(50), rng.IntN(50) },
	}
	for i := range 40 {
		nodes := f.inv.Snapshot().Nodes
		n := *nodes[rng.IntN(len(nodes))] // a copy: the snapshot's nodes are never changed
		var frames []veil.PushFrame
		switch op := rng.IntN(8); {
		case op == 0 && len(nodes) > 4:
			frames = append(frames, veil.PushFrame{Resource: "/nodes/", Event: veil.PushDeleted, ID: n.ID})
		case op == 1:
			n.ID, n.VerboseName = fmt.Sprintf("%08x-0000-4000-8000-000000000000", rng.Uint32()), "new"
			frames = append(frames, nodeFrame(t, veil.PushCreated, n, func(map[string]any) {}))
		default: // one node changed, or two in the same batch
			frames = append(frames, nodeFrame(t, veil.PushUpdated, n, edits[rng.IntN(len(edits))]))
			if op%2 == 0 {
				m := *nodes[rng.IntN(len(nodes))]
				frames = append(frames, nodeFrame(t, veil.PushUpdated, m, edits[rng.IntN(len(edits))]))
			}
		}
		f.inv.Apply(frames)
		sameText(fmt.Sprintf("change %d", i))
	}
}
