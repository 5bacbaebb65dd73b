package inventory

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestDomainsChangedSince: a snapshot tells the ids of the domains pushes changed, added or
// deleted since an older one's DomainsGen, and says it cannot once a listing replaced the
// domains since or the pushes since outgrew the log.
func TestDomainsChangedSince(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 8, VMs: 5}, pushCollect(), veil.Config{})
	f.mustRefresh(t)
	listed := f.inv.Snapshot()
	vms := listed.Domains.Slice()
	update := func(id, name string) veil.PushFrame {
		obj, _ := json.Marshal(map[string]any{"id": id, "verbose_name": name, "status": "ACTIVE"})
		return veil.PushFrame{Resource: "/domains/", Event: veil.PushUpdated, ID: id, Object: obj}
	}
	since := func(s *Snapshot, gen uint64) []string {
		t.Helper()
		ids, ok := s.DomainsChangedSince(gen)
		if !ok {
			t.Fatalf("snapshot %d: no ids since domains generation %d", s.Gen, gen)
		}
		slices.Sort(ids)
		return slices.Compact(ids)
	}
	if ids := since(listed, listed.DomainsGen); len(ids) != 0 {
		t.Errorf("changed since itself: %q", ids)
	}
	f.inv.Apply([]veil.PushFrame{update(vms[0].ID, "one")})
	first := f.inv.Snapshot()
	f.inv.Apply([]veil.PushFrame{update(vms[1].ID, "two"), {Resource: "/domains/", Event: veil.PushDeleted, ID: vms[2].ID}, update(vms[0].ID, "three")})
	now := f.inv.Snapshot()
	want := []string{vms[0].ID, vms[1].ID, vms[2].ID}
	slices.Sort(want)
	if ids := since(now, listed.DomainsGen); !slices.Equal(ids, want) {
		t.Errorf("since the listing: %q, want %q", ids, want)
	}
	if ids := since(now, first.DomainsGen); !slices.Equal(ids, want) {
		t.Errorf("since the first push: %q, want %q", ids, want)
	}
	if ids := since(first, listed.DomainsGen); !slices.Equal(ids, []string{vms[0].ID}) {
		t.Errorf("the older snapshot since the listing: %q", ids)
	}
	if _, ok := now.DomainsChangedSince(now.DomainsGen + 1); ok {
		t.Error("ids since a generation to come")
	}
	f.mustRefresh(t)
	relisted := f.inv.Snapshot()
	if _, ok := relisted.DomainsChangedSince(now.DomainsGen); ok {
		t.Error("ids since before a listing")
	}
	if ids := since(relisted, relisted.DomainsGen); len(ids) != 0 {
		t.Errorf("changed since the listing itself: %q", ids)
	}
	for i := range maxDomainLog + 10 {
		f.inv.Apply([]veil.PushFrame{update(vms[3].ID, string(rune('a'+i%26)))})
	}
	if _, ok := f.inv.Snapshot().DomainsChangedSince(relisted.DomainsGen); ok {
		t.Error("ids since further back than the log")
	}
	last := f.inv.Snapshot()
	if ids := since(last, last.DomainsGen-3); !slices.Equal(ids, []string{vms[3].ID}) {
		t.Errorf("the last three pushes: %q", ids)
	}
}
