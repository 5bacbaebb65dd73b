package collector

import (
	"strconv"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestMissingCollectionIsNotAnOutage: a controller without a collection (the vendor's mock has
// no /api/tasks/) or a token without rights to it keeps veil_up 1; the collection is reported
// unavailable with its reason, logged once, and asked again only every 10th refresh.
func TestMissingCollectionIsNotAnOutage(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		status     int
		collection string
		gone       string // a family that must vanish with the collection
	}{
		{"tasks answer 404", "/api/tasks/", 404, collTasks, "veil_tasks{"},
		{"clusters answer 403", "/api/clusters/", 403, collClusters, "veil_cluster_info"},
		{"datapools answer 405", "/api/data-pools/", 405, collDatapools, "veil_datapool_info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, smallInventory, testCollect(), veil.Config{})
			f.mustRefresh(t)
			f.sim.SetFaults(veiltest.Fault{Path: tt.path, Kind: "status", Status: tt.status})
			if err := f.refresh(t); err != nil {
				t.Fatalf("refresh with %s answering %d failed: %v", tt.path, tt.status, err)
			}
			if v := value(t, f.inv, "veil_up"); v != "1" {
				t.Errorf("veil_up = %s, want 1", v)
			}
			r := runOf(t, f.inv, tt.collection)
			if r.Success || !r.Unavailable || !strings.Contains(r.Error, strconv.Itoa(tt.status)) {
				t.Errorf("run %+v, want unavailable with the reason", r)
			}
			if st := f.inv.Status(); !st.Up || st.LastError != "" {
				t.Errorf("status up %v error %q, want up", st.Up, st.LastError)
			}
			if s := series(t, f.inv, tt.gone); len(s) != 0 {
				t.Errorf("data of the missing collection still served: %q", s)
			}
			if s := series(t, f.inv, "veil_node_info"); len(s) != 2 {
				t.Errorf("nodes not served: %q", s)
			}
			// Asked again at the 10th refresh after, not before.
			f.sim.ResetRequests()
			for range unavailableRetryEvery - 1 {
				f.mustRefresh(t)
			}
			for _, req := range f.sim.Requests() {
				if strings.HasPrefix(req.Path, tt.path) {
					t.Fatalf("unavailable %s asked again before its turn: %+v", tt.path, req)
				}
			}
			if r := runOf(t, f.inv, tt.collection); !r.Unavailable {
				t.Errorf("a skipped refresh forgot the collection is unavailable: %+v", r)
			}
			f.sim.ClearFaults()
			f.mustRefresh(t)
			asked := false
			for _, req := range f.sim.Requests() {
				asked = asked || strings.HasPrefix(req.Path, tt.path)
			}
			if !asked {
				t.Fatalf("%s not asked again at the %dth refresh", tt.path, unavailableRetryEvery)
			}
			if r := runOf(t, f.inv, tt.collection); !r.Success || r.Unavailable {
				t.Errorf("after the collection came back: %+v", r)
			}
			logs := f.logs.String()
			if strings.Count(logs, "not available") != 1 || strings.Count(logs, "available again") != 1 || strings.Contains(logs, "down") {
				t.Errorf("want one line when it goes, one when it comes back, no outage:\n%s", logs)
			}
		})
	}
}

// TestCoreCollectionMissingIsAnOutage: nodes and domains are what a controller is; without
// them (404) or with a token rejected (401 everywhere) veil_up is 0.
func TestCoreCollectionMissingIsAnOutage(t *testing.T) {
	for _, fault := range []veiltest.Fault{
		{Path: "/api/domains/", Kind: "status", Status: 404},
		{Path: "/api/nodes/", Kind: "status", Status: 403},
		{Kind: "status", Status: 401},
	} {
		f := newFixture(t, smallInventory, testCollect(), veil.Config{})
		f.sim.SetFaults(fault)
		if err := f.refresh(t); err == nil {
			t.Errorf("%+v: refresh succeeded", fault)
		}
		if v := value(t, f.inv, "veil_up"); v != "0" {
			t.Errorf("%+v: veil_up = %s, want 0", fault, v)
		}
		for _, r := range f.inv.RunStatus() {
			if r.Unavailable {
				t.Errorf("%+v: %s reported unavailable in an outage", fault, r.Collector)
			}
		}
	}
}
