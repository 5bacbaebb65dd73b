package veil_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestListedValuesOwnTheirBytes: the buffers of pages a listing decoded are read into again by
// the next listings; what the first listing returned must not change when they are.
func TestListedValuesOwnTheirBytes(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 3, VMs: 450, Nodes: 20, Datapools: 4})
	t.Cleanup(sim.Close)
	c := newClient(t, sim, nil)
	ctx := context.Background()
	doms, err := c.Domains(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	disks, err := c.Vdisks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for _, d := range doms {
			if info, ok := sim.Domain(d.ID); !ok || info.Name != d.VerboseName {
				t.Fatalf("listed domain %q %q is not the simulator's", d.ID, d.VerboseName)
			}
		}
	}
	check()
	golden := fmt.Sprintf("%+v %+v", doms, disks)
	for _, id := range sim.DomainIDs()[:100] {
		if err := sim.DeleteVM(id); err != nil {
			t.Fatal(err)
		}
	}
	sim.AddVMs(200)
	for range 3 { // other bytes, read into the buffers handed back
		if _, err := c.Domains(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Vdisks(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprintf("%+v %+v", doms, disks); got != golden {
		t.Error("values listed before changed when their pages' buffers were read into again")
	}
}
