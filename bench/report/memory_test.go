package main

import (
	"strings"
	"testing"
)

// TestMemoryFigures: one format is judged against 150 MiB at 10,000 VMs (500 at 50,000), all
// three against 1.25 times that, each says its bytes per series, text is optional at 50,000 and
// an old run's hwm-MiB (all three formats) still reads as that.
func TestMemoryFigures(t *testing.T) {
	r := results{
		at("BenchmarkScrape", 10000): {"series": {100000}, "hwm-MiB-protobuf": {140}, "hwm-MiB-text": {151}, "hwm-MiB-all": {180}},
		at("BenchmarkScrape", 50000): {"series": {500000}, "hwm-MiB": {630}, "hwm-MiB-protobuf": {499}},
	}
	want := map[string]string{
		"10000 VMs, guest checks on, scraped in protobuf only (native histograms)": "PASS <= 150 1468 bytes per series",
		"10000 VMs, guest checks on, scraped in text only":                         "MISS <= 150 1583 bytes per series",
		"10000 VMs, guest checks on, scraped in all three formats":                 "PASS <= 187.5 1887 bytes per series",
		"50000 VMs, guest checks on, scraped in protobuf only (native histograms)": "PASS <= 500 1046 bytes per series",
		"50000 VMs, guest checks on, scraped in all three formats":                 "MISS <= 625 1321 bytes per series",
	}
	got := map[string]string{}
	for _, n := range []int{10000, 50000} {
		for _, f := range memoryFigures(r, n) {
			name := strings.TrimPrefix(f.Name, "resident memory (VmHWM), ")
			note, _, _ := strings.Cut(f.Note, " (")
			got[name] = f.Status + " " + f.Target + " " + note
		}
	}
	if len(got) != len(want) {
		t.Errorf("figures %v, want %d", got, len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	r[at("BenchmarkScrape", 10000)]["hwm-MiB-text"] = nil
	for _, f := range memoryFigures(r, 10000) {
		if strings.Contains(f.Name, "text only") && f.Status != "NOT MEASURED" {
			t.Errorf("text at 10,000 VMs missing: %s, want NOT MEASURED", f.Status)
		}
	}
}
