package main

import "testing"

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
