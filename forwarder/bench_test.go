package forwarder

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// BenchmarkCatchUp publishes a 100,000-event backlog with 20 ms simulator latency per page and
// reports throughput as a ratio to the floor: a page (events.page_size, 100 by default) per answer
// time times the pages read concurrently. Run with -benchtime=1x.
//
// The simulator runs as a process of its own (bin/veil-sim, built once), as the platform does in
// production and as the inventory benchmarks have it: in the benchmark's process its heap (the
// backlog, its request log) and its goroutines would share the exporter's garbage collector and
// scheduler, and time the platform spends would be counted as the forwarder's.
//
// ratio (events/s) is measured from Run's start, so it includes the start-up (position load and
// save, locating the boundary, the first page): about 50 ms, two round trips, once per backlog.
// ratio_from_first (events_from_first/s) is the throughput once events flow: from the first poll
// that sees an event published to the end, counting only the events published in between.
func BenchmarkCatchUp(b *testing.B) {
	warmUpCatchUp.Do(func() { catchUp(b, "oldest_first", 20_000) })
	for _, order := range []string{"oldest_first", "newest_first"} {
		b.Run(order, func(b *testing.B) {
			for range b.N {
				reportCatchUp(b, catchUp(b, order, 100_000))
			}
		})
	}
}

// warmUpCatchUp: the first catch-up of a process, unmeasured. In every process the first
// measured one was below those after it (0.888-0.897 of the floor against 0.907-0.919, oldest
// first, in four processes, the CPU per 1,000 events 46-50 ms against 37-41): what a process
// does once, which a daemon running for weeks does not do before its catch-ups.
var warmUpCatchUp sync.Once

// catchUpRun is one catch-up measured: the forwarder, the simulator it read, and the times.
type catchUpRun struct {
	fw           *Forwarder
	sim          *simProcess
	backlog      int
	latency      time.Duration
	start, first time.Time // Run's start; the first poll that saw an event published
	end          time.Time
	atFirst      uint64 // events published at first
	cpu          time.Duration
}

// catchUp publishes a backlog of events from a simulator process with benchLatency per page,
// from Run's start until every event is published.
func catchUp(b *testing.B, order string, backlog int) catchUpRun {
	latency := benchLatency()
	r := newRig(b, veiltest.Options{InitialTasks: -1}, order, "earliest")
	sim := startSimProcess(b, "--initial-events", strconv.Itoa(backlog), "--events-order", order, "--latency", latency.String())
	// The client's limit is what the platform sees: the same as the forwarder's concurrency, as
	// the daemon wires it (controllers[].max_concurrency).
	var err error
	r.cli, err = veil.New(veil.Config{URL: sim.url, Token: sim.token, MaxConcurrency: catchUpPages, MaxRetries: 5, RetryBaseDelay: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	run := catchUpRun{fw: r.forwarder(), sim: sim, backlog: backlog, latency: latency}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	run.start, run.cpu = time.Now(), processCPU()
	b.ResetTimer()
	go func() { done <- run.fw.Run(ctx) }()
	for {
		n := run.fw.Status().Published
		if n >= uint64(backlog) {
			break
		}
		if n > 0 && run.first.IsZero() {
			run.first, run.atFirst = time.Now(), n
		}
		time.Sleep(5 * time.Millisecond)
	}
	run.end, run.cpu = time.Now(), processCPU()-run.cpu
	b.StopTimer()
	cancel()
	<-done
	return run
}

// reportCatchUp reports a catch-up's throughput, CPU and ratios to the floor.
func reportCatchUp(b *testing.B, run catchUpRun) {
	el := run.end.Sub(run.start)
	rate := float64(run.backlog) / el.Seconds()
	b.ReportMetric(rate, "events/s")
	var rateFirst float64
	if !run.first.IsZero() {
		rateFirst = float64(uint64(run.backlog)-run.atFirst) / run.end.Sub(run.first).Seconds()
		b.ReportMetric(rateFirst, "events_from_first/s")
	}
	b.ReportMetric(el.Seconds(), "s/backlog")
	// The CPU the catch-up took per 1,000 events: the forwarder's, and the JetStream server's,
	// which runs in this process (the simulator does not).
	b.ReportMetric(run.cpu.Seconds()*1000/(float64(run.backlog)/1000), "cpu-ms/1k-events")
	var state struct {
		InFlightMax int `json:"in_flight_max"`
	}
	fw, sim := run.fw, run.sim
	sim.get(b, "/_sim/state", &state)
	if state.InFlightMax > fw.reader.concurrency {
		b.Fatalf("%d requests in flight at the platform, budget %d", state.InFlightMax, fw.reader.concurrency)
	}
	if run.latency <= 0 {
		return
	}
	// The floor is what the platform allowed in this run: pages of fw.reader.page events, concurrency
	// at a time, each taking the time the simulator took to answer it (its request log: the
	// configured latency plus its timer's overshoot and its own work, about 1 ms on this
	// machine). The nominal floor assumes exactly the configured latency.
	nominal := float64(fw.reader.page) / run.latency.Seconds() * float64(fw.reader.concurrency)
	floor := nominal
	if answer := sim.answerTime(b, run.start); answer > 0 {
		floor = float64(fw.reader.page) / answer.Seconds() * float64(fw.reader.concurrency)
		b.ReportMetric(float64(answer)/float64(time.Millisecond), "answer_ms")
	}
	b.ReportMetric(floor, "floor_events/s")
	b.ReportMetric(rate/floor, "ratio")
	b.ReportMetric(rate/nominal, "ratio_nominal")
	if rateFirst > 0 {
		b.ReportMetric(rateFirst/floor, "ratio_from_first")
	}
	b.ReportMetric(readerOnly(b, sim, fw.reader.ordering, fw.reader.page, fw.reader.concurrency), "reader_only_ratio")
}

// readerOnly is the ceiling of any reader on this machine, as a ratio to the same floor: a client
// that does nothing but read pages (readerPages of page rows, none overlapping, concurrency at a
// time, through the same client) against the same simulator, its answers counted as they arrive.
// What separates it from the floor is the HTTP round trip between the two processes (writing,
// waking, reading, on cores they share with everything else); what separates the forwarder from
// it is the forwarder's own work and the one row each page overlaps the one before. make bench
// judges the catch-up against it (bench/report, catchUpGoal).
func readerOnly(b *testing.B, sim *simProcess, ordering string, page, concurrency int) float64 {
	b.Helper()
	const readerPages = 200 // a second's reading: the ratio settles well before
	cli, err := veil.New(veil.Config{URL: sim.url, Token: sim.token, MaxConcurrency: concurrency})
	if err != nil {
		b.Fatal(err)
	}
	p := clientPager{c: cli}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < readerPages; i = next.Add(1) - 1 {
				if _, err := p.pageBody(context.Background(), int(i)*page, page, ordering); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rate := float64(readerPages*page) / time.Since(start).Seconds()
	return rate / (float64(page) / sim.answerTime(b, start).Seconds() * float64(concurrency))
}

// simProcess is a veil-sim process on a free loopback port, stopped when the benchmark ends.
type simProcess struct{ url, token string }

func startSimProcess(b *testing.B, args ...string) *simProcess {
	b.Helper()
	p := &simProcess{url: "http://127.0.0.1:" + strconv.Itoa(testutil.FreePort(b)), token: "bench-token"}
	cmd := exec.Command(testutil.Build(b, "cmd/veil-sim"), append([]string{"--listen", strings.TrimPrefix(p.url, "http://"), "--token", p.token, "--event-rate", "0"}, args...)...)
	cmd.Stderr = os.Stderr
	testutil.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testutil.WaitHTTP(b, p.url+"/_sim/state", time.Minute)
	return p
}

// answerTime is the mean time the simulator took to answer the event pages requested since
// start (0 when there were none).
func (p *simProcess) answerTime(b *testing.B, since time.Time) time.Duration {
	b.Helper()
	var reqs []veiltest.Request
	p.get(b, "/_sim/requests", &reqs)
	var sum time.Duration
	var n int
	for _, q := range reqs {
		if q.Path == eventsPath && !q.Start.Before(since) {
			sum += q.Duration
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// get decodes the JSON answer of a control endpoint.
func (p *simProcess) get(b *testing.B, path string, v any) {
	b.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		b.Fatalf("%s: %v", path, err)
	}
}

// BenchmarkSteadyStateDelay measures, at a steady event rate, the delay from an event's creation
// to its delivery to a JetStream subscriber; the target is p99 <= poll_interval + 100 ms.
func BenchmarkSteadyStateDelay(b *testing.B) {
	const poll = 250 * time.Millisecond
	for range b.N {
		r := newRig(b, veiltest.Options{EventsOrder: "newest_first", InitialTasks: -1, Latency: 20 * time.Millisecond}, "auto", "latest")
		r.ev.PollInterval = poll
		nc, err := nats.Connect(r.nats.URL())
		if err != nil {
			b.Fatal(err)
		}
		_, stop := r.run()
		var delays []time.Duration
		msgs := make(chan time.Duration, 10000)
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cons, err := js.OrderedConsumer(ctx, "VEIL_EVENTS", jetstream.OrderedConsumerConfig{})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			created, err := time.Parse(time.RFC3339Nano, m.Headers().Get("ce-time"))
			if err == nil {
				msgs <- time.Since(created)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		r.sim.SetEventRate(50)
		time.Sleep(5 * time.Second)
		r.sim.SetEventRate(0)
		time.Sleep(poll + 500*time.Millisecond)
		b.StopTimer()
		cc.Stop()
		stop()
		nc.Close()
		close(msgs)
		for d := range msgs {
			delays = append(delays, d)
		}
		if len(delays) == 0 {
			b.Fatal("nothing delivered")
		}
		slices.Sort(delays)
		p := func(q float64) float64 { return delays[int(q*float64(len(delays)-1))].Seconds() * 1000 }
		b.ReportMetric(p(0.5), "p50_ms")
		b.ReportMetric(p(0.99), "p99_ms")
		b.ReportMetric(float64((poll + 100*time.Millisecond).Milliseconds()), "target_ms")
		b.ReportMetric(float64(len(delays)), "events")
	}
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLatency is the simulator latency per page (FORWARDER_BENCH_LATENCY overrides 20ms, e.g.
// 0s to see the forwarder's own ceiling).
func benchLatency() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FORWARDER_BENCH_LATENCY")); err == nil {
		return d
	}
	return 20 * time.Millisecond
}
