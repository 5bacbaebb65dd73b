// This file holds the large fleet's figures (make bench-fleet, BenchmarkFleet500) and how they
// join a results file written by make bench.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// largeFleet is the benchmark of make bench-fleet, and the prefix of its figures' names.
const (
	largeFleet       = "BenchmarkFleet500"
	largeFleetPrefix = "large fleet: "
	maxFleetSeconds  = 10 * 60 // make bench-fleet on a 2-core machine
)

// largeFleetFigures are the figures of BenchmarkFleet500; none when it did not run (make bench
// does not run it).
func largeFleetFigures(r results) (figs []Figure) {
	fl := largeFleet
	if r[fl] == nil {
		return nil
	}
	one := func(u string) float64 { return median(r.get(fl, u)) }
	n, m := one("controllers"), one("replicas")
	name := func(s string) string { return largeFleetPrefix + s }
	f := figure(figureSpec{name: name(fmt.Sprintf("spread, %.0f controllers on %.0f replicas", n, m)), unit: "controllers", runs: r.get(fl, "spread-dev"), floor: 3, floorName: fmt.Sprintf("goal: %.0f ± 3", n/m), ratios: scale(r.get(fl, "spread-dev"), 1.0/3), op: "<=", target: 1})
	f.Note = fmt.Sprintf("counts %.0f..%.0f; settled %.0f s after the first replica started (%.0f VMs each); CPU meanwhile: replicas %.2f, NATS %.2f, simulator %.2f cores",
		one("spread-min"), one("spread-max"), one("settle-s"), one("vms"), one("settle-replicas-cores"), one("settle-nats-cores"), one("settle-sim-cores"))
	figs = append(figs, f)
	f = figure(figureSpec{name: name(fmt.Sprintf("takeover of %.0f after kill -9", one("takeover-of"))), unit: "s", runs: r.get(fl, "takeover-s"), floor: one("bound-s"), floorName: "lease_ttl + 2 s", ratios: ratios(r.get(fl, "takeover-s"), one("bound-s")), op: "<=", target: 1})
	f.Note = fmt.Sprintf("lease_ttl %.0f s; the new pod took its share back in %.1f s", one("lease-ttl-s"), one("rejoin-s"))
	figs = append(figs, f)
	figs = append(figs, figure(figureSpec{name: name("healthy controllers moved by kill -9"), unit: "controllers", runs: r.get(fl, "healthy-moved"), op: "<="}))
	f = figure(figureSpec{name: name(fmt.Sprintf("requests, %.0f replicas / 1 exporter", m)), unit: "requests", runs: r.get(fl, "requests-replicas"), floor: one("requests-one"), floorName: "one exporter", ratios: r.get(fl, "requests-ratio"), op: "<=", target: 1.05})
	figs = append(figs, f)
	f = figure(figureSpec{name: name("rolling restart: moves above 2 per restart of the holder"), unit: "controllers", runs: r.get(fl, "roll-moves-over-goal"), op: "<="})
	f.Note = fmt.Sprintf("moves per controller at most %.0f, mean %.2f; %.0f replicas rolled in %.0f s, settled after %.0f s", one("roll-moves-max"), one("roll-moves-mean"), m, one("roll-s"), one("roll-settle-s"))
	figs = append(figs, f)
	f = figure(figureSpec{name: name("rolling restart: longest forwarding pause"), unit: "s", runs: r.get(fl, "roll-pause-s")})
	f.Note = fmt.Sprintf("the longest time any controller's events stopped reaching the stream; median over the controllers %.1f s, %.0f over 30 s; with nothing happening the longest gap is %.1f s at the median, %.1f s at most (events fed and polled every 5 s)",
		one("roll-pause-median-s"), one("roll-pauses-over-30s"), one("quiet-gap-median-s"), one("quiet-gap-max-s"))
	figs = append(figs, f)
	wrong := sums(r.get(fl, "lost"), r.get(fl, "duplicated"), r.get(fl, "disorder"))
	f = figure(figureSpec{name: name("events not once and in order"), unit: "events", runs: wrong, op: "<="})
	f.Note = fmt.Sprintf("of %.0f: lost %.0f, duplicated %.0f, out of order or foreign %.0f; controllers with any %.0f; \"too many inflight\" answers %.0f",
		one("events"), one("lost"), one("duplicated"), one("disorder"), one("controllers-wrong"), one("inflight-refusals"))
	figs = append(figs, f)
	figs = append(figs, largeFleetCosts(r)...)
	return figs
}

// largeFleetCosts are the large fleet's costs and its NATS scenarios (report only).
func largeFleetCosts(r results) (figs []Figure) {
	fl := largeFleet
	one := func(u string) float64 { return median(r.get(fl, u)) }
	name := func(s string) string { return largeFleetPrefix + s }
	f := figure(figureSpec{name: name("CPU per controller per replica"), unit: "mcores", runs: r.get(fl, "cpu-per-controller-mcores")})
	f.Note = fmt.Sprintf("the busiest replica's CPU over its controllers; busiest replica %.2f cores; NATS %.2f, simulator %.2f; one exporter running all: %.2f cores",
		one("cpu-replica-cores"), one("nats-cores"), one("sim-cpu-cores"), one("cpu-one-cores"))
	figs = append(figs, f)
	f = figure(figureSpec{name: name("memory per controller per replica"), unit: "MiB", runs: r.get(fl, "rss-per-controller-MiB")})
	f.Note = fmt.Sprintf("VmRSS over the controllers held, the largest; VmHWM largest replica %.0f MiB, one exporter running all %.0f MiB", one("hwm-replica-MiB"), one("hwm-one-MiB"))
	figs = append(figs, f)
	figs = append(figs, figure(figureSpec{name: name("lease bucket writes"), unit: "writes/s", runs: r.get(fl, "lease-writes-per-s")}))
	f = figure(figureSpec{name: name("NATS node killed 15 s: controllers moved"), unit: "controllers", runs: r.get(fl, "nats-node-moved")})
	f.Note = fmt.Sprintf("the stream leader's node; longest forwarding pause %.1f s", one("nats-node-pause-s"))
	figs = append(figs, f)
	f = figure(figureSpec{name: name("catch-up after the whole NATS cluster was down"), unit: "s", runs: r.get(fl, "outage-catchup-s")})
	f.Note = fmt.Sprintf("every lease written again after %.1f s; %.0f controllers on another replica after", one("outage-held-s"), one("outage-moved"))
	figs = append(figs, f)
	return figs
}

// ratios divides every value by d.
func ratios(v []float64, d float64) []float64 { return scale(v, 1/d) }

// sums adds the runs of several figures, run by run.
func sums(vs ...[]float64) []float64 {
	n := -1
	for _, v := range vs {
		if n < 0 || len(v) < n {
			n = len(v)
		}
	}
	out := make([]float64, max(n, 0))
	for _, v := range vs {
		for i := range out {
			out[i] += v[i]
		}
	}
	return out
}

// fleetDurationFigure judges make bench-fleet's wall-clock time.
func fleetDurationFigure(seconds float64) Figure {
	f := figure(figureSpec{name: largeFleetPrefix + "make bench-fleet, the whole run", unit: "s", runs: []float64{seconds}, op: "<=", target: maxFleetSeconds})
	f.Note = "on this machine, building included"
	return f
}

// mergeLargeFleet puts rep's large fleet figures and raw runs into the results already at path
// (written by make bench), replacing that file's own large fleet figures; with no file there it
// returns rep as it is.
func mergeLargeFleet(path string, rep Report) (Report, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	var old Report
	if err := json.Unmarshal(raw, &old); err != nil {
		return rep, fmt.Errorf("%s: %w", path, err)
	}
	var figs []Figure
	for _, f := range old.Figures {
		if !strings.HasPrefix(f.Name, largeFleetPrefix) {
			figs = append(figs, f)
		}
	}
	old.Figures = append(figs, rep.Figures...)
	if old.Raw == nil {
		old.Raw = map[string]map[string][]float64{}
	}
	old.Raw[largeFleet] = rep.Raw[largeFleet]
	return old, nil
}
