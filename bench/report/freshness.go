package main

// The freshness figures: a change pushed by the controller to /metrics, in steady state and in
// a VDI boot storm.

import "fmt"

// pushFigures: the inventory kept fresh by the controller's push channel at mainSize VMs, 20
// changes a second.
func pushFigures(r results, mainSize int) (figs []Figure) {
	p := at("BenchmarkPushFreshness", mainSize)
	f := figure(fmt.Sprintf("push: change to /metrics p99, %d VMs, 20 changes/s", mainSize), "s", r.get(p, "metrics-p99-s"), 0, "", nil, "<=", 1)
	if v := r.get(p, "metrics-p50-s"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.3f s; to the inventory p50 %.3f s, p99 %.3f s; %.1f ms CPU per change; polling: collect.interval (30 s) at worst", median(v),
			median(r.get(p, "inventory-p50-s")), median(r.get(p, "inventory-p99-s")), median(r.get(p, "cpu-s/change"))*1000)
	}
	figs = append(figs, f)
	// The CPU of a change, and at 50,000 VMs against it: what a change costs must not grow with
	// the inventory.
	perChange := func(vms int) (ms []float64) {
		for _, v := range r.get(at("BenchmarkPushFreshness", vms), "cpu-s/change") {
			ms = append(ms, v*1000)
		}
		return ms
	}
	small := perChange(mainSize)
	figs = append(figs, figure(fmt.Sprintf("push: CPU per change, %d VMs", mainSize), "ms", small, 0, "", nil, "<=", 3))
	large := 5 * mainSize
	f = figure(fmt.Sprintf("push: CPU per change, %d VMs", large), "ms", perChange(large), median(small), fmt.Sprintf("CPU per change at %d VMs", mainSize), nil, "<=", 1.5)
	if len(small) == 0 && f.Status != "NOT MEASURED" {
		f.Status, f.Ratio = "NOT MEASURED", nil
	}
	figs = append(figs, f)
	f = figure(fmt.Sprintf("push: controller requests an hour against polling, %d VMs", mainSize), "requests/h", r.get(p, "push-requests/h"), median(r.get(p, "poll-requests/h")), "polling every collect.interval", r.get(p, "requests-ratio-to-polling"), "<=", 0.2)
	figs = append(figs, f)
	return figs
}

// stormFigures: a VDI boot storm, 2,000 of 10,000 VMs powered on within 60 s with push,
// events and guest checks on, every format scraped every 15 s.
func stormFigures(r results) (figs []Figure) {
	st := "BenchmarkBootStorm"
	f := figure("boot storm: change to /metrics p99, 2,000 of 10,000 VMs on in 60 s", "s", r.get(st, "change-p99-s"), 0, "", nil, "<=", 1)
	if v := r.get(st, "change-p50-s"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.3f s; /metrics read every 250 ms, so up to that much is the reading's", median(v))
	}
	figs = append(figs, f)
	f = figure("boot storm: event delay p99", "s", r.get(st, "event-p99-s"), 0, "", nil, "<=", 1)
	if v := r.get(st, "event-p50-s"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.3f s over %.0f events; events.poll_interval 500ms", median(v), median(r.get(st, "events")))
	}
	figs = append(figs, f)
	f = figure("boot storm: exporter CPU over the storm", "cores", r.get(st, "cpu-cores"), 0, "", nil, "<=", 0.5)
	if v := r.get(st, "hwm-MiB"); len(v) > 0 {
		f.Note = fmt.Sprintf("the storm and 10 s after it; VmHWM %.0f MiB, %.0f series", median(v), median(r.get(st, "series")))
	}
	return append(figs, f)
}
