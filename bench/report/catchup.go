package main

// The event catch-up's throughput goal, and the floor it is judged against: what a client that
// does nothing but read pages reaches on the same machine in the same run.

import "fmt"

// catchUpGoal bounds the catch-up's throughput from below, as a share of a bare reader's: a
// client that only reads pages (no overlap between them, nothing published), against the same
// simulator, with the same concurrency, right after the catch-up in the same process.
//
// The page floor (a page per answer time the simulator measured, times the pages read at once)
// leaves out the round trip between the two processes: about 0.9 ms a page on an idle 2-core
// machine, more under load and on a slower CPU. Every reader pays it: a bare reader reaches
// 0.94-0.98 of the page floor after the catch-up, and 0.905-0.923 during one (reading beside
// it, four pages at a time of its own). The
// forwarder keeps its request slots busy (an answer read to the next request sent: 0.1 ms at the
// 99th percentile) and 25% more of its CPU per event did not move its ratio, so what separates
// it from the page floor beyond the one row each page overlaps is the machine, not the
// forwarder: judged against the page floor, the same code measured 0.889-0.924 from run to run.
// Against the bare reader the forwarder may lose a tenth: the overlap (2%) and its own work.
const catchUpGoal = 0.9

// catchUpFigures: the catch-up's throughput for each order, judged against the bare reader of
// each run; the ratio to the page floor goes in the note.
func catchUpFigures(r results) (figs []Figure) {
	for _, order := range []string{"oldest_first", "newest_first"} {
		c := "BenchmarkCatchUp/" + order
		rate, page, bare := r.get(c, "events/s"), r.get(c, "ratio"), r.get(c, "reader_only_ratio")
		var judged []float64 // run by run; none unless every run has its bare reader
		if len(page) == len(bare) {
			judged = sweepFloors(page, bare)
		}
		if len(judged) == 0 {
			rate = nil // a run without its bare reader cannot be judged: not measured
		}
		f := figure(figureSpec{name: "event catch-up, 100,000 events, " + order, unit: "events/s", runs: rate, floor: median(sweepFloors(rate, judged)), floorName: "a bare reader, same run", ratios: judged, op: ">=", target: catchUpGoal})
		if judged != nil {
			f.Note = fmt.Sprintf("%.3f of the page floor (answers of %.2f ms); the bare reader %.3f of it",
				median(page), median(r.get(c, "answer_ms")), median(bare))
		}
		figs = append(figs, f)
	}
	return figs
}
