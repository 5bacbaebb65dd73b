package main

// The freshness figures: a change pushed by the controller to /metrics, in steady state and in
// a VDI boot storm.

import "fmt"

// pushFigures: the inventory kept fresh by the controller's push channel at mainSize VMs, 20
// changes a second.
func pushFigures(r results, mainSize int) (figs []Figure) {
	p := at("BenchmarkPushFreshness", mainSize)
	f := figure(figureSpec{name: fmt.Sprintf("push: change to /metrics p99, %d VMs, 20 changes/s", mainSize), unit: "s", runs: r.get(p, "metrics-p99-s"), op: "<=", target: 1})
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
	figs = append(figs, figure(figureSpec{name: fmt.Sprintf("push: CPU per change, %d VMs", mainSize), unit: "ms", runs: small, op: "<=", target: 3}))
	large := 5 * mainSize
	f = figure(figureSpec{name: fmt.Sprintf("push: CPU per change, %d VMs", large), unit: "ms", runs: perChange(large), floor: median(small), floorName: fmt.Sprintf("CPU per change at %d VMs", mainSize), op: "<=", target: 1.5})
	if len(small) == 0 && f.Status != "NOT MEASURED" {
		f.Status, f.Ratio = "NOT MEASURED", nil
	}
	figs = append(figs, f)
	f = figure(figureSpec{name: fmt.Sprintf("push: controller requests an hour against polling, %d VMs", mainSize), unit: "requests/h", runs: r.get(p, "push-requests/h"), floor: median(r.get(p, "poll-requests/h")), floorName: "polling every collect.interval", ratios: r.get(p, "requests-ratio-to-polling"), op: "<=", target: 0.2})
	figs = append(figs, f)
	return figs
}

// stormFigures: a VDI boot storm, 2,000 of 10,000 VMs powered on within 60 s with push,
// events and guest checks on, every format scraped every 15 s.
func stormFigures(r results) (figs []Figure) {
	st := "BenchmarkBootStorm"
	f := figure(figureSpec{name: "boot storm: change to /metrics p99, 2,000 of 10,000 VMs on in 60 s", unit: "s", runs: r.get(st, "change-p99-s"), op: "<=", target: 1})
	if v := r.get(st, "change-p50-s"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.3f s; /metrics read every 250 ms, so up to that much is the reading's", median(v))
	}
	figs = append(figs, f)
	f = figure(figureSpec{name: "boot storm: event delay p99", unit: "s", runs: r.get(st, "event-p99-s"), op: "<=", target: 1})
	if v := r.get(st, "event-p50-s"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.3f s over %.0f events; events.poll_interval 500ms", median(v), median(r.get(st, "events")))
	}
	figs = append(figs, f)
	f = figure(figureSpec{name: "boot storm: exporter CPU over the storm", unit: "cores", runs: r.get(st, "cpu-cores"), op: "<=", target: 0.5})
	if v := r.get(st, "hwm-MiB"); len(v) > 0 {
		f.Note = fmt.Sprintf("the storm and 10 s after it; VmHWM %.0f MiB, %.0f series", median(v), median(r.get(st, "series")))
	}
	return append(figs, f)
}
