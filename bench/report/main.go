// Command report reads `go test -bench` output (several runs of each benchmark, from
// scripts/bench.sh) and prints one line per performance goal: the median, the spread, the floor
// or baseline measured in the same run, the ratio, the target and PASS/MISS. It also writes
// the figures as JSON, so runs can be compared over time. A goal whose benchmark did not run is
// printed as "not measured"; it is not a failure.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// results maps a benchmark name (GOMAXPROCS suffix dropped) to its units, each with the value
// of every run.
type results map[string]map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads benchmark lines ("BenchmarkX/sub-2  5  123 ns/op  1.5 ratio-to-floor ...") and
// the "cpu:" header; everything else is ignored.
func parse(r io.Reader) (results, string, error) {
	res := results{}
	cpu := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if c, ok := strings.CutPrefix(line, "cpu: "); ok && cpu == "" {
			cpu = strings.TrimSpace(c)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		if res[name] == nil {
			res[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, cpu, sc.Err()
}

// get returns the values of the first unit found among units (benchmarks spell them
// differently: ratio-to-floor, ratio_to_floor).
func (r results) get(name string, units ...string) []float64 {
	for _, u := range units {
		if v := r[name][u]; len(v) > 0 {
			return v
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Figure is one goal (or a reported-only figure) of one run.
type Figure struct {
	Name      string    `json:"name"`
	Unit      string    `json:"unit"`
	Value     *float64  `json:"value"` // median; null when not measured
	Min       *float64  `json:"min,omitempty"`
	Max       *float64  `json:"max,omitempty"`
	Runs      []float64 `json:"runs,omitempty"`
	Floor     *float64  `json:"floor,omitempty"` // floor or baseline, same unit as Value
	FloorName string    `json:"floor_name,omitempty"`
	Ratio     *float64  `json:"ratio,omitempty"`
	Target    string    `json:"target,omitempty"` // e.g. "<= 1.25"
	Status    string    `json:"status"`           // PASS, MISS, REPORT, NOT MEASURED
	Note      string    `json:"note,omitempty"`
}

// Report is the machine-readable file.
type Report struct {
	Date      string                          `json:"date"`
	GoVersion string                          `json:"go_version"`
	Commit    string                          `json:"commit"`
	CPU       string                          `json:"cpu"`
	CPUs      int                             `json:"cpus"`
	OSArch    string                          `json:"os_arch"`
	Figures   []Figure                        `json:"figures"`
	Growth    []Figure                        `json:"growth"`
	Raw       map[string]map[string][]float64 `json:"raw"`
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// figureSpec is what a Figure is built from: the runs of a value, a floor (median) and a ratio
// per run (or nil: value/floor of the medians). op is "<=" or ">=", target the bound of the
// ratio (or of the value when there is no floor); op "" reports only.
type figureSpec struct {
	name, unit string
	runs       []float64
	floor      float64
	floorName  string
	ratios     []float64
	op         string
	target     float64
}

// figure builds a Figure from s.
func figure(s figureSpec) Figure {
	name, unit, runs, floor, floorName, ratios, op, target := s.name, s.unit, s.runs, s.floor, s.floorName, s.ratios, s.op, s.target
	f := Figure{Name: name, Unit: unit, FloorName: floorName}
	if len(runs) == 0 {
		f.Status = "NOT MEASURED"
		if op != "" {
			f.Target = fmt.Sprintf("%s %g", op, target)
		}
		return f
	}
	v := median(runs)
	f.Value, f.Runs = ptr(v), runs
	f.Min, f.Max = ptr(slices.Min(runs)), ptr(slices.Max(runs))
	checked := v
	if floorName != "" {
		f.Floor = ptr(floor)
		r := v / floor
		if len(ratios) > 0 {
			r = median(ratios)
		}
		f.Ratio = ptr(r)
		checked = r
	}
	switch op {
	case "":
		f.Status = "REPORT"
	case "<=", ">=":
		f.Target = fmt.Sprintf("%s %g", op, target)
		ok := checked <= target
		if op == ">=" {
			ok = checked >= target
		}
		f.Status = map[bool]string{true: "PASS", false: "MISS"}[ok]
		if f.Ratio == nil && math.IsNaN(checked) {
			f.Status = "NOT MEASURED"
		}
	}
	return f
}

// build makes the goals' figures, in the table's order, and the growth figures.
func build(r results, sizes []int, mainSize int) (figs, growth []Figure) {
	figs = append(figs, inventoryFigures(r, mainSize)...)
	figs = append(figs, loopFigures(r)...)
	figs = append(figs, pushFigures(r, mainSize)...)
	figs = append(figs, stormFigures(r)...)
	figs = append(figs, replicaFigures(r)...)
	figs = append(figs, refreshCPUFigure(r, mainSize))
	figs = append(figs, largeFleetFigures(r)...)
	return figs, growthFigures(r, sizes)
}

// at names a benchmark run at n VMs.
func at(bench string, n int) string { return fmt.Sprintf("%s/vms=%d", bench, n) }

// inventoryFigures: the inventory refresh, /metrics encoded live and scrapes of the rendered
// text, at mainSize VMs (scrapes at 10,000 and 50,000).
func inventoryFigures(r results, mainSize int) (figs []Figure) {
	ref, serve, base := at("BenchmarkInventoryRefresh", mainSize), at("BenchmarkMetricsServe", mainSize), at("BenchmarkMetricsServeBaseline", mainSize)

	// The floor is the requests ÷ max_concurrency × the time the simulator took to answer them,
	// measured in the same run (its log): the nominal 20 ms latency leaves out the simulator's
	// own work (encoding 10,000 VMs) on the same cores, which no client can go below.
	refresh, answer := r.get(ref, "refresh-s"), r.get(ref, "ratio-to-answer-floor")
	f := figure(figureSpec{name: fmt.Sprintf("inventory refresh, %d VMs", mainSize), unit: "s", runs: refresh, floor: median(sweepFloors(refresh, answer)), floorName: "requests/concurrency*answer time", ratios: answer, op: "<=", target: 1.25})
	if nom := r.get(ref, "ratio-to-floor"); len(nom) > 0 {
		f.Note = fmt.Sprintf("%.3f of the nominal floor (requests/concurrency*20 ms latency, %.3f s)", median(nom), median(r.get(ref, "floor-s")))
	}
	figs = append(figs, f)

	serveS, baseS := scale(r.get(serve, "ns/op"), 1e-9), scale(r.get(base, "ns/op"), 1e-9)
	f = figure(figureSpec{name: fmt.Sprintf("/metrics live encoding (name[] filters, protobuf text), %d VMs", mainSize), unit: "s", runs: serveS, floor: median(baseS), floorName: "client_golang const metrics", op: "<=", target: 1.5})
	if len(baseS) == 0 {
		f.Status, f.Ratio = "NOT MEASURED", nil
	}
	if s := r.get(serve, "series"); len(s) > 0 {
		f.Note = fmt.Sprintf("%.0f series, %.1f MiB per scrape", median(s), median(r.get(serve, "bytes/scrape"))/(1<<20))
	}
	figs = append(figs, f)

	for _, fm := range []string{"text", "all"} {
		gr := "BenchmarkGuestRender/formats=" + fm
		f = figure(figureSpec{name: "guest series render, every family compressed anew, formats=" + fm, unit: "ms", runs: scale(r.get(gr, "ns/op"), 1e-6)})
		if v := r.get(gr, "allocs/op"); len(v) > 0 {
			f.Note = fmt.Sprintf("%.0f VMs, %.1f MiB allocated and %.0f allocations per render (formats=all: OpenMetrics and protobuf made too, as while scrapers ask for them)", median(r.get(gr, "vms")), median(r.get(gr, "B/op"))/(1<<20), median(v))
		}
		figs = append(figs, f)
	}

	for _, n := range []int{10000, 50000} {
		sc := at("BenchmarkScrape", n)
		for _, fm := range []struct{ name, asks string }{
			{"text", "text first"},
			{"openmetrics", "Prometheus 3 default, OpenMetrics first"},
			{"protobuf", "native histograms, protobuf first"},
		} {
			sfx := "-" + fm.name
			f = figure(figureSpec{name: fmt.Sprintf("/metrics scrape median, %d VMs, %s", n, fm.asks), unit: "ms", runs: r.get(sc, "scrape-ms"+sfx), floor: median(r.get(sc, "floor-ms"+sfx)), floorName: "same bytes from memory", ratios: r.get(sc, "ratio-median"+sfx), op: "<=", target: 3})
			if s := r.get(sc, "series"); len(s) > 0 {
				f.Note = fmt.Sprintf("%.0f series, %.1f MB gzip, guest checks on; guest coverage complete after %.0f s", median(s), median(r.get(sc, "gzip-MB"+sfx)), median(r.get(sc, "sweep-s-all", "sweep-s")))
			}
			figs = append(figs, f)
			f = figure(figureSpec{name: fmt.Sprintf("/metrics scrape p99, %d VMs, %s", n, fm.asks), unit: "ms", runs: r.get(sc, "scrape-p99-ms"+sfx), floor: median(r.get(sc, "floor-p99-ms"+sfx)), floorName: "the floor's p99, interleaved", ratios: r.get(sc, "ratio-p99"+sfx), op: "<=", target: 5})
			figs = append(figs, f)
		}
		figs = append(figs, memoryFigures(r, n)...)
	}
	return figs
}

// loopFigures: the guest ping sweep, the event catch-up and the event delivery delay.
func loopFigures(r results) (figs []Figure) {
	g := "BenchmarkGuestPingSweep"
	sweep, gratio := r.get(g, "sweep-s"), r.get(g, "ratio-to-floor", "ratio_to_floor")
	f := figure(figureSpec{name: "guest ping sweep at 1000 requests/s", unit: "s", runs: sweep, floor: median(sweepFloors(sweep, gratio)), floorName: "VMs/budget", ratios: gratio, op: "<=", target: 1.1})
	if v := r.get(g, "vms"); len(v) > 0 {
		f.Note = fmt.Sprintf("%.0f VMs", median(v))
		if s, w := r.get(g, "sweeps"), r.get(g, "worst-ratio-to-floor"); len(s) > 0 && len(w) > 0 {
			f.Note += fmt.Sprintf("; median of %.0f consecutive sweeps of one checker, the slowest %.3f of its floor", median(s), slices.Max(w))
		}
	}
	figs = append(figs, f)

	figs = append(figs, catchUpFigures(r)...)
	figs = append(figs, catchUpCPUFigures(r)...)

	d := "BenchmarkSteadyStateDelay"
	tgt := median(r.get(d, "target_ms", "target_p99_ms"))
	if math.IsNaN(tgt) {
		tgt = 350 // poll_interval 250ms + 100ms, as that benchmark runs
	}
	f = figure(figureSpec{name: "event delivery delay p99", unit: "ms", runs: r.get(d, "p99_ms"), op: "<=", target: tgt})
	if v := r.get(d, "p50_ms"); len(v) > 0 {
		f.Note = fmt.Sprintf("p50 %.0f ms; target poll_interval + 100 ms", median(v))
	}
	figs = append(figs, f)
	return figs
}

// replicaFigures: takeovers and requests with replicas, and the fleet run.
func replicaFigures(r results) (figs []Figure) {
	h := "BenchmarkReplicas"
	figs = append(figs,
		trialsFigure(r, "replicas: takeover after kill -9", h, "takeover"),
		trialsFigure(r, "replicas: takeover after SIGSTOP", h, "stop-takeover"),
		figure(figureSpec{name: "replicas: controller requests, 3 replicas / 1 exporter", unit: "requests", runs: r.get(h, "requests-three"), floor: median(r.get(h, "requests-one")), floorName: "one exporter", ratios: r.get(h, "requests-ratio"), op: "<=", target: 1.05}))

	fl := "BenchmarkFleet"
	f := figure(figureSpec{name: "fleet: spread, 60 controllers on 3 replicas", unit: "controllers", runs: r.get(fl, "spread-dev"), floor: 2, floorName: "goal: 20 ± 2", ratios: r.get(fl, "spread-ratio"), op: "<=", target: 1})
	if lo, hi := r.get(fl, "spread-min"), r.get(fl, "spread-max"); len(lo) > 0 && len(hi) > 0 {
		f.Note = fmt.Sprintf("distance from 20 per replica; counts %.0f..%.0f; settled %.0f s after the replicas started; 1,000 VMs each", median(lo), median(hi), median(r.get(fl, "settle-s")))
	}
	figs = append(figs, f)
	figs = append(figs, trialsFigure(r, "fleet: takeover of 20 after kill -9", fl, "takeover"))
	f = figure(figureSpec{name: "fleet: healthy controllers moved by kill -9", unit: "controllers", runs: r.get(fl, "healthy-moved"), op: "<="})
	figs = append(figs, f)
	lost, dup, dis := r.get(fl, "lost"), r.get(fl, "duplicated"), r.get(fl, "disorder")
	var wrong []float64
	for i := range min(len(lost), len(dup), len(dis)) {
		wrong = append(wrong, lost[i]+dup[i]+dis[i])
	}
	f = figure(figureSpec{name: "fleet: events not once and in order", unit: "events", runs: wrong, op: "<="})
	if ev := r.get(fl, "events"); len(ev) > 0 {
		f.Note = fmt.Sprintf("of %.0f: lost %.0f, duplicated %.0f, out of order or foreign %.0f; \"too many inflight\" answers %.0f",
			median(ev), median(lost), median(dup), median(dis), median(r.get(fl, "inflight-refusals")))
	}
	figs = append(figs, f)
	figs = append(figs, figure(figureSpec{name: "fleet: requests, 3 replicas / 1 exporter", unit: "requests", runs: r.get(fl, "requests-three"), floor: median(r.get(fl, "requests-one")), floorName: "one exporter", ratios: r.get(fl, "requests-ratio"), op: "<=", target: 1.05}))
	f = figure(figureSpec{name: "fleet: CPU of a replica, 20 x 1,000 VMs", unit: "cores", runs: r.get(fl, "cpu-replica-cores")})
	if v := r.get(fl, "cpu-one-cores"); len(v) > 0 {
		f.Note = fmt.Sprintf("one exporter running all 60: %.2f cores; the simulator %.2f; VmHWM %.0f MiB (all 60: %.0f MiB); collect.interval 5s, events polled every 1s, guest checks off",
			median(v), median(r.get(fl, "sim-cpu-cores")), median(r.get(fl, "hwm-replica-MiB")), median(r.get(fl, "hwm-one-MiB")))
	}
	figs = append(figs, f)
	return figs
}

// maxBenchSeconds is the goal for the whole of make bench on a 2-core machine: a benchmark
// suite nobody waits for is one nobody runs.
const maxBenchSeconds = 15 * 60

// durationFigure judges the whole run's wall-clock time.
func durationFigure(seconds float64) Figure {
	f := figure(figureSpec{name: "make bench: the whole run", unit: "s", runs: []float64{seconds}, op: "<=", target: maxBenchSeconds})
	f.Note = "on this machine; the stages' start times are in bench/out/bench.txt"
	return f
}

// minTrials is how many trials a timed figure of single events (a takeover) needs.
const minTrials = 3

// trialsFigure is a takeover timed in several trials (<name>-s their median, <name>-worst-s the
// slowest, <name>-trials how many): the slowest is judged against the bound lease_ttl + 2 s
// (bound-s), so that one lucky trial cannot pass it; fewer than minTrials is not measured.
func trialsFigure(r results, title, bench, name string) Figure {
	bound := median(r.get(bench, "bound-s"))
	worst, trials := r.get(bench, name+"-worst-s"), r.get(bench, name+"-trials")
	if len(worst) == 0 || len(trials) == 0 || median(trials) < minTrials {
		f := figure(figureSpec{name: title, unit: "s", runs: nil, floor: bound, floorName: "lease_ttl + 2 s", op: "<=", target: 1})
		if len(trials) > 0 {
			f.Note = fmt.Sprintf("%.0f trials, fewer than %d", median(trials), minTrials)
		}
		return f
	}
	ratios := make([]float64, len(worst))
	for i, w := range worst {
		ratios[i] = w / bound
	}
	f := figure(figureSpec{name: title, unit: "s", runs: r.get(bench, name+"-s"), floor: bound, floorName: "lease_ttl + 2 s", ratios: ratios, op: "<=", target: 1})
	f.Note = fmt.Sprintf("median of %.0f trials; the slowest %.3f s is what the ratio judges", median(trials), slices.Max(worst))
	return f
}

// growthFigures: refresh and /metrics at each of sizes VMs.
func growthFigures(r results, sizes []int) (growth []Figure) {
	for _, n := range sizes {
		ref, serve, base := at("BenchmarkInventoryRefresh", n), at("BenchmarkMetricsServe", n), at("BenchmarkMetricsServeBaseline", n)
		f := figure(figureSpec{name: fmt.Sprintf("refresh, %d VMs", n), unit: "s", runs: r.get(ref, "refresh-s"), floor: median(r.get(ref, "floor-s")), floorName: "floor", ratios: r.get(ref, "ratio-to-floor")})
		if cpu := r.get(ref, "cpu-s/refresh"); len(cpu) > 0 {
			f.Note = fmt.Sprintf("CPU %.3f s = %.1f µs/VM", median(cpu), median(cpu)/float64(n)*1e6)
		}
		growth = append(growth, f)
		f = figure(figureSpec{name: fmt.Sprintf("/metrics, %d VMs", n), unit: "s", runs: scale(r.get(serve, "ns/op"), 1e-9), floor: median(scale(r.get(base, "ns/op"), 1e-9)), floorName: "baseline"})
		if s := median(r.get(serve, "series")); !math.IsNaN(s) {
			f.Note = fmt.Sprintf("%.0f series, %.2f µs/series", s, median(r.get(serve, "ns/op"))/s/1e3)
		}
		growth = append(growth, f)
	}
	return growth
}

// sweepFloors derives the floor of each run from its value and its ratio.
func sweepFloors(v, ratio []float64) []float64 {
	var out []float64
	for i := range min(len(v), len(ratio)) {
		if ratio[i] != 0 {
			out = append(out, v[i]/ratio[i])
		}
	}
	return out
}

func scale(v []float64, k float64) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = v[i] * k
	}
	return out
}

// linearity says whether a cost per VM holds from the smallest to the largest size.
func linearity(r results, sizes []int) []string {
	if len(sizes) < 2 {
		return nil
	}
	var lines []string
	per := func(bench, unit string, n int, k float64) float64 {
		return median(r.get(fmt.Sprintf("%s/vms=%d", bench, n), unit)) * k / float64(n)
	}
	for _, m := range []struct{ what, bench, unit string }{
		{"refresh CPU", "BenchmarkInventoryRefresh", "cpu-s/refresh"},
		{"refresh time", "BenchmarkInventoryRefresh", "refresh-s"},
		{"/metrics time", "BenchmarkMetricsServe", "ns/op"},
	} {
		var parts []string
		lo, hi := math.Inf(1), 0.0
		for _, n := range sizes {
			v := per(m.bench, m.unit, n, 1)
			if math.IsNaN(v) {
				continue
			}
			if m.unit == "ns/op" {
				v /= 1e9
			}
			parts = append(parts, fmt.Sprintf("%d: %.2f µs/VM", n, v*1e6))
			if n >= 10000 { // below, fixed costs (nodes, tasks, datapools) dominate
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		if len(parts) == 0 {
			continue
		}
		verdict := "not enough sizes"
		if hi > 0 && !math.IsInf(lo, 0) {
			if hi/lo <= 1.3 {
				verdict = fmt.Sprintf("linear from 10,000 up (per-VM cost within %.0f%%)", (hi/lo-1)*100)
			} else {
				verdict = fmt.Sprintf("NOT linear: per-VM cost varies %.2fx from 10,000 up", hi/lo)
			}
		}
		lines = append(lines, fmt.Sprintf("  %-14s %s -> %s", m.what, strings.Join(parts, ", "), verdict))
	}
	return lines
}

func fmtv(p *float64, unit string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.4g %s", *p, unit)
}

func printTable(w io.Writer, title string, figs []Figure) {
	fmt.Fprintf(w, "\n%s\n", title)
	fmt.Fprintf(w, "%-44s %-14s %-24s %-14s %-7s %-8s %s\n", "figure", "median", "spread (min..max)", "floor/base", "ratio", "target", "status")
	for _, f := range figs {
		spread := "-"
		if f.Min != nil {
			spread = fmt.Sprintf("%.4g..%.4g (n=%d)", *f.Min, *f.Max, len(f.Runs))
		}
		ratio := "-"
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.3f", *f.Ratio)
		}
		target := f.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(w, "%-44s %-14s %-24s %-14s %-7s %-8s %s\n", f.Name, fmtv(f.Value, f.Unit), spread, fmtv(f.Floor, f.Unit), ratio, target, f.Status)
		if f.Note != "" {
			fmt.Fprintf(w, "%-44s   %s\n", "", f.Note)
		}
	}
}

func main() {
	out := flag.String("out", "bench/out/results.json", "where to write the JSON results (empty: nowhere); make bench-reference copies them to the committed bench/results.json")
	commit := flag.String("commit", "", "commit measured")
	sizesFlag := flag.String("sizes", "1000,10000,50000", "VM counts of the growth figures")
	mainSize := flag.Int("size", 10000, "VM count of the goals")
	elapsed := flag.Float64("elapsed", 0, "seconds the whole make bench took (0: not measured, as when the report is made again from saved output)")
	merge := flag.Bool("merge", false, "make bench-fleet: report only the large fleet's figures and put them into the results already at -out, replacing their own")
	flag.Parse()

	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			sizes = append(sizes, n)
		}
	}
	in := io.Reader(os.Stdin)
	if flag.NArg() > 0 {
		var rs []io.Reader
		for _, p := range flag.Args() {
			f, err := os.Open(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, "report:", err)
				os.Exit(2)
			}
			defer f.Close()
			rs = append(rs, f)
		}
		in = io.MultiReader(rs...)
	}
	res, cpu, err := parse(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report: reading benchmark output:", err)
		os.Exit(2)
	}
	figs, growth := build(res, sizes, *mainSize)
	if *merge {
		figs, growth = largeFleetFigures(res), nil
	}
	switch {
	case *elapsed > 0 && *merge:
		figs = append(figs, fleetDurationFigure(*elapsed))
	case *elapsed > 0:
		figs = append(figs, durationFigure(*elapsed))
	}
	rep := Report{
		Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), Commit: *commit,
		CPU: cpu, CPUs: runtime.NumCPU(), OSArch: runtime.GOOS + "/" + runtime.GOARCH,
		Figures: figs, Growth: growth, Raw: res,
	}
	fmt.Printf("veil-exporter benchmarks  %s  %s  commit %s  cpu %s x%d\n", rep.Date, rep.GoVersion, rep.Commit, rep.CPU, rep.CPUs)
	printTable(os.Stdout, "Goals (medians of the runs; floor/baseline measured in the same run)", figs)
	printTable(os.Stdout, "Growth (report only)", growth)
	for _, l := range linearity(res, sizes) {
		fmt.Println(l)
	}
	if *out != "" && *merge {
		if rep, err = mergeLargeFleet(*out, rep); err != nil {
			fmt.Fprintln(os.Stderr, "report: joining the results:", err)
			os.Exit(2)
		}
	}
	if *out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*out, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "report: writing results:", err)
			os.Exit(2)
		}
		fmt.Printf("\nwritten to %s\n", *out)
	}
	if failed := failures(figs); failed != "" {
		fmt.Println(failed)
		os.Exit(1)
	}
}

// failures says how many goals were missed or not measured ("" when none): make bench fails
// then, so that a goal cannot quietly stop holding, nor a benchmark quietly stop running.
func failures(figs []Figure) string {
	missed, unmeasured := 0, 0
	for _, f := range figs {
		switch {
		case f.Status == "MISS":
			missed++
		case f.Status == "NOT MEASURED" && f.Target != "":
			unmeasured++
		}
	}
	if missed+unmeasured == 0 {
		return ""
	}
	return fmt.Sprintf("FAILED: %d goals missed, %d not measured", missed, unmeasured)
}
