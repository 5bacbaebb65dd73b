package main

// The exporter's peak resident memory (VmHWM) in BenchmarkScrape: one fresh bin/veil-exporter
// per way of scraping it (above 10,000 VMs, all three formats after protobuf on one exporter),
// judged against the goal of one format scraped (150 MiB at 10,000 VMs, 500 MiB at 50,000) or,
// with all three formats scraped, 1.25 times that; and the bytes per series, so that a larger
// inventory or more series per VM reads apart from a heavier exporter.

import "fmt"

// allFormatsAllowance is how much more than one format the exporter may hold while scrapers
// ask for all three.
const allFormatsAllowance = 1.25

// memoryFigures: VmHWM at n VMs with protobuf only, text only (when measured) and all three
// formats scraped.
func memoryFigures(r results, n int) (figs []Figure) {
	sc := at("BenchmarkScrape", n)
	limit := 150.0
	if n >= 50000 {
		limit = 500
	}
	series := median(r.get(sc, "series"))
	for _, m := range []struct {
		unit, asks string
		limit      float64
		optional   bool
	}{
		{"hwm-MiB-protobuf", "protobuf only (native histograms)", limit, false},
		{"hwm-MiB-text", "text only", limit, n > 10000},
		{"hwm-MiB-all", "all three formats", limit * allFormatsAllowance, false},
	} {
		v := r.get(sc, m.unit)
		if m.unit == "hwm-MiB-all" {
			v = r.get(sc, m.unit, "hwm-MiB") // before one-format runs, hwm-MiB was this one
		}
		if len(v) == 0 && m.optional {
			continue
		}
		f := figure(figureSpec{name: fmt.Sprintf("resident memory (VmHWM), %d VMs, guest checks on, scraped in %s", n, m.asks), unit: "MiB", runs: v, op: "<=", target: m.limit})
		if len(v) > 0 {
			how := "a fresh bin/veil-exporter scraped only so from its start, peak once every eligible guest was checked and scraped"
			if m.unit == "hwm-MiB-all" && len(r.get(sc, "sweep-s-all")) == 0 && len(r.get(sc, "sweep-s-protobuf")) > 0 {
				how = "the protobuf-only exporter, then scraped in all three formats for a guest ping interval: the peak of both"
			}
			f.Note = fmt.Sprintf("%.0f bytes per series (%.0f series); %s", median(v)*(1<<20)/series, series, how)
		}
		if m.unit == "hwm-MiB-all" {
			if rss := r.get(sc, "rss-MiB"); len(rss) > 0 {
				f.Note += fmt.Sprintf("; VmRSS %.0f MiB after the timed scrapes", median(rss))
			}
		}
		figs = append(figs, f)
	}
	return figs
}
