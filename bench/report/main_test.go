package main

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestFailures: a missed goal, or a goal not measured (a benchmark that failed or no longer
// runs), fails make bench; figures reported without a goal never do.
func TestFailures(t *testing.T) {
	pass := Figure{Name: "a", Status: "PASS", Target: "<= 3"}
	report := Figure{Name: "b", Status: "REPORT"}
	unreported := Figure{Name: "c", Status: "NOT MEASURED"}
	for _, tt := range []struct {
		figs []Figure
		fail bool
	}{
		{[]Figure{pass, report, unreported}, false},
		{[]Figure{pass, {Name: "d", Status: "MISS", Target: "<= 3"}}, true},
		{[]Figure{pass, {Name: "e", Status: "NOT MEASURED", Target: "<= 1.5"}}, true},
	} {
		if got := failures(tt.figs); (got != "") != tt.fail {
			t.Errorf("failures(%v) = %q, want failing %v", tt.figs, got, tt.fail)
		}
	}
}

// TestTrialsFigure: a takeover is judged by its slowest trial, and fewer than three trials is
// not a measurement (make bench fails).
func TestTrialsFigure(t *testing.T) {
	for _, tt := range []struct {
		name   string
		units  map[string][]float64
		status string
	}{
		{"all within", map[string][]float64{"takeover-s": {3}, "takeover-worst-s": {4}, "takeover-trials": {3}, "bound-s": {5}}, "PASS"},
		{"median within, slowest not", map[string][]float64{"takeover-s": {3}, "takeover-worst-s": {5.5}, "takeover-trials": {3}, "bound-s": {5}}, "MISS"},
		{"one trial", map[string][]float64{"takeover-s": {3}, "takeover-worst-s": {3}, "takeover-trials": {1}, "bound-s": {5}}, "NOT MEASURED"},
		{"old single-trial output", map[string][]float64{"takeover-s": {3}, "ratio-to-bound": {0.6}, "bound-s": {5}}, "NOT MEASURED"},
	} {
		f := trialsFigure(results{"B": tt.units}, "t", "B", "takeover")
		if f.Status != tt.status {
			t.Errorf("%s: status %s, want %s (%+v)", tt.name, f.Status, tt.status, f)
		}
		if tt.status != "PASS" && failures([]Figure{f}) == "" {
			t.Errorf("%s: %s does not fail make bench", tt.name, f.Status)
		}
	}
}

// TestMergeLargeFleet: make bench-fleet's figures join the results make bench wrote, replacing
// the large fleet figures of an earlier run and keeping every other.
func TestMergeLargeFleet(t *testing.T) {
	path := t.TempDir() + "/results.json"
	old := Report{Commit: "old", Figures: []Figure{{Name: "inventory refresh"}, {Name: largeFleetPrefix + "lease bucket writes", Status: "stale"}},
		Raw: map[string]map[string][]float64{"BenchmarkFleet": {"lost": {0}}}}
	b, _ := json.Marshal(old)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Report{Figures: []Figure{{Name: largeFleetPrefix + "lease bucket writes", Status: "REPORT"}},
		Raw: map[string]map[string][]float64{largeFleet: {"lost": {0}}}}
	got, err := mergeLargeFleet(path, rep)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got.Figures {
		names = append(names, f.Name+"/"+f.Status)
	}
	want := []string{"inventory refresh/", largeFleetPrefix + "lease bucket writes/REPORT"}
	if !slices.Equal(names, want) || got.Raw["BenchmarkFleet"] == nil || got.Raw[largeFleet] == nil {
		t.Errorf("merged figures %v (want %v), raw %v", names, want, got.Raw)
	}
	if fresh, _ := mergeLargeFleet(t.TempDir()+"/none.json", rep); len(fresh.Figures) != 1 {
		t.Errorf("with no results file: %v, want the fleet's figures alone", fresh.Figures)
	}
}

// TestRefreshCPUFigure: the CPU per refresh is judged at 10,000 VMs (<= 0.2 s) and reported at
// any other size.
func TestRefreshCPUFigure(t *testing.T) {
	for _, tt := range []struct {
		vms    int
		cpu    float64
		status string
	}{{10000, 0.15, "PASS"}, {10000, 0.25, "MISS"}, {1000, 0.25, "REPORT"}} {
		r := results{at("BenchmarkInventoryRefresh", tt.vms): {"cpu-s/refresh": {tt.cpu}}}
		if f := refreshCPUFigure(r, tt.vms); f.Status != tt.status {
			t.Errorf("%d VMs, %.2f s: %s, want %s", tt.vms, tt.cpu, f.Status, tt.status)
		}
	}
	if f := refreshCPUFigure(results{}, 10000); f.Status != "NOT MEASURED" || failures([]Figure{f}) == "" {
		t.Errorf("not measured: %+v does not fail make bench", f)
	}
}

// TestCatchUpCPUFigure: the CPU per 1,000 events caught up is judged for each order.
func TestCatchUpCPUFigure(t *testing.T) {
	r := results{"BenchmarkCatchUp/oldest_first": {"cpu-ms/1k-events": {30, 45, 70}}, "BenchmarkCatchUp/newest_first": {"cpu-ms/1k-events": {61, 65, 41}}}
	got := map[string]string{}
	for _, f := range loopFigures(r) {
		got[f.Name] = f.Status
	}
	if got["CPU per 1,000 events caught up, oldest_first"] != "PASS" || got["CPU per 1,000 events caught up, newest_first"] != "MISS" {
		t.Errorf("statuses %v", got)
	}
}

// TestPushCPUFigures: the CPU per pushed change is judged at 10,000 VMs against 3 ms and at
// 50,000 against 1.5 times the 10,000 VMs' figure; a size not run is not measured (make bench
// fails).
func TestPushCPUFigures(t *testing.T) {
	small, large := "BenchmarkPushFreshness/vms=10000", "BenchmarkPushFreshness/vms=50000"
	for _, tt := range []struct {
		name       string
		r          results
		want10k    string
		wantLarger string
	}{
		{"both within", results{small: {"cpu-s/change": {0.0026}}, large: {"cpu-s/change": {0.0037}}}, "PASS", "PASS"},
		{"grows with the inventory", results{small: {"cpu-s/change": {0.0026}}, large: {"cpu-s/change": {0.0040}}}, "PASS", "MISS"},
		{"over 3 ms", results{small: {"cpu-s/change": {0.0034}}, large: {"cpu-s/change": {0.0040}}}, "MISS", "PASS"},
		{"50,000 not run", results{small: {"cpu-s/change": {0.0026}}}, "PASS", "NOT MEASURED"},
		{"10,000 not run", results{large: {"cpu-s/change": {0.0037}}}, "NOT MEASURED", "NOT MEASURED"},
	} {
		got := map[string]string{}
		for _, f := range pushFigures(tt.r, 10000) {
			got[f.Name] = f.Status
		}
		if s := got["push: CPU per change, 10000 VMs"]; s != tt.want10k {
			t.Errorf("%s: 10,000 VMs %s, want %s", tt.name, s, tt.want10k)
		}
		if s := got["push: CPU per change, 50000 VMs"]; s != tt.wantLarger {
			t.Errorf("%s: 50,000 VMs %s, want %s", tt.name, s, tt.wantLarger)
		}
	}
}

// TestCatchUpFigures: the catch-up is judged run by run against the bare reader of the same run;
// a run without its bare reader is not measured (make bench fails).
func TestCatchUpFigures(t *testing.T) {
	old, fresh := "BenchmarkCatchUp/oldest_first", "BenchmarkCatchUp/newest_first"
	r := results{
		// 0.8962/0.9572, 0.9041/0.9637, 0.8888/0.9631: a run of the last stop that missed the
		// page floor's goal (median 0.896); against its bare reader 0.936, 0.938, 0.923.
		old: {"events/s": {16781, 16866, 16599}, "ratio": {0.8962, 0.9041, 0.8888}, "reader_only_ratio": {0.9572, 0.9637, 0.9631}},
		// A forwarder that loses a fifth to its own work where a bare reader loses nothing.
		fresh: {"events/s": {15000, 15100, 14900}, "ratio": {0.80, 0.81, 0.79}, "reader_only_ratio": {0.99, 0.99, 1.0}},
	}
	figs := catchUpFigures(r)
	if len(figs) != 2 {
		t.Fatalf("%d figures", len(figs))
	}
	if f := figs[0]; f.Status != "PASS" || f.Ratio == nil || *f.Ratio < 0.935 || *f.Ratio > 0.937 {
		t.Errorf("oldest first: %s, ratio %v, want PASS at 0.936", f.Status, f.Ratio)
	}
	if f := figs[1]; f.Status != "MISS" {
		t.Errorf("newest first: %s, want MISS (0.80 of a bare reader)", f.Status)
	}
	delete(r[fresh], "reader_only_ratio")
	if f := catchUpFigures(r)[1]; f.Status != "NOT MEASURED" || failures([]Figure{f}) == "" {
		t.Errorf("without its bare reader: %+v does not fail make bench", f)
	}
}
