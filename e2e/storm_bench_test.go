// The boot storm's figures for make bench: a real bin/veil-exporter (push, events and guest
// checks on) against a bin/veil-sim of 10,000 VMs, while 2,000 of them are powered on within
// 60 s as a VDI pool's desktops are at 8 a.m., each with its task, its events and its guest
// agent coming up, and Prometheus scrapes every format every 15 s.

package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
)

const stormPoll = 250 * time.Millisecond // how often /metrics is read for the VMs turned on

// stormPingInterval is the exporter's guest.ping_interval, the configuration's default: the
// storm begins after the first sweep, while the reads of a minute's interval (file systems,
// network counters) of half the VMs are still to come.
const stormPingInterval = 30 * time.Second

// The storm's size: 10,000 VMs of which 2,000 are powered on within 60 s (VEIL_BENCH_STORM_VMS
// scales all three down, for a quick look).
var stormVMs, stormStarts, stormDuration = func() (int, int, time.Duration) {
	vms, _ := strconv.Atoi(os.Getenv("VEIL_BENCH_STORM_VMS"))
	if vms <= 0 {
		vms = 10000
	}
	return vms, vms / 5, time.Duration(vms) * 6 * time.Millisecond
}()

// BenchmarkBootStorm runs once whatever b.N (make bench asks for 1x). It reports
// change-p50-s and change-p99-s (from the simulator applying a power-on to the first /metrics
// read that shows it; reads every stormPoll, so up to that much is the reading's), event-p50-s
// and event-p99-s (from an event's created to its arrival on NATS), cpu-cores (the exporter's
// CPU over the storm and 10 s after it, in cores), hwm-MiB and series.
func BenchmarkBootStorm(b *testing.B) {
	phases := newPhaseLog(b)
	r := startStormRig(b)
	phases.done("the simulator, NATS and the exporter steady (every guest checked once)")
	client, err := veil.New(veil.Config{URL: r.simURL, Token: r.token})
	if err != nil {
		b.Fatal(err)
	}
	off := stormCandidates(b, client)
	events := stormEvents(b, r.natsAddr)
	defer events.stop()
	defer r.scrapers.stop()

	pid := r.proc.cmd.Process.Pid
	cpu0, t0 := cpuTime(b, pid), time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	storm := make(chan error, 1)
	go func() { storm <- stormStart(ctx, r.simURL, r.token, off) }()
	profiled := profileStorm(b)
	seen := r.watch(b, off, t0.Add(stormDuration+2*time.Minute))
	if err := <-storm; err != nil {
		b.Fatalf("the storm: %v", err)
	}
	// The exporter's CPU over the storm and its tail (events, tasks, guest checks of the VMs).
	if rest := time.Until(t0.Add(stormDuration + 10*time.Second)); rest > 0 {
		time.Sleep(rest) // measuring a window of time, not waiting for an outcome
	}
	cores := (cpuTime(b, pid) - cpu0).Seconds() / time.Since(t0).Seconds()
	<-profiled
	phases.done("the storm and its tail")
	defer phases.done("the figures")

	applied := poweredOnAt(b, r.simURL, r.token, off)
	var changes []float64
	for id, at := range seen {
		if a, ok := applied[id]; ok {
			changes = append(changes, max(at.Sub(a), 0).Seconds())
		}
	}
	if len(changes) < len(off)*9/10 {
		b.Fatalf("the simulator's change log holds the power-on of %d of %d VMs", len(changes), len(off))
	}
	delays := events.stop()
	events.logSlowest(b, t0)
	if len(delays) < len(off) {
		b.Fatalf("%d events on NATS during the storm, want at least one per VM turned on (%d)", len(delays), len(off))
	}
	if n := r.scrapers.stop(); n == 0 {
		b.Fatal("no scrape of the 15 s scrapers answered")
	}
	raw, _, err := scrapeOnce(r.metrics)
	if err != nil {
		b.Fatal(err)
	}
	logSlowest(b, seen, applied, t0)
	b.ReportMetric(quantile(changes, 0.5), "change-p50-s")
	b.ReportMetric(quantile(changes, 0.99), "change-p99-s")
	b.ReportMetric(quantile(delays, 0.5), "event-p50-s")
	b.ReportMetric(quantile(delays, 0.99), "event-p99-s")
	b.ReportMetric(float64(len(delays)), "events")
	b.ReportMetric(cores, "cpu-cores")
	b.ReportMetric(peakRSS(b, pid), "hwm-MiB")
	b.ReportMetric(float64(strings.Count(raw, "\n")-strings.Count(raw, "\n#")), "series")
}

// profileStorm writes a CPU profile of the exporter over the storm and its tail to
// $VEIL_BENCH_STORM_CPUPROFILE, when set, from the exporter's /debug/pprof (built with
// VEIL_BUILD_TAGS=pprof and serving it on $VEIL_PPROF_ADDR). The channel is closed when done.
func profileStorm(b *testing.B) <-chan struct{} {
	done := make(chan struct{})
	out, addr := os.Getenv("VEIL_BENCH_STORM_CPUPROFILE"), os.Getenv("VEIL_PPROF_ADDR")
	if out == "" || addr == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		secs := int((stormDuration + 10*time.Second).Seconds())
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
		if err != nil {
			b.Logf("CPU profile: %v", err)
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(out, raw, 0o644)
		}
		if err != nil {
			b.Logf("CPU profile: %v", err)
		}
	}()
	return done
}

// logSlowest logs the slowest changes to /metrics, with when the simulator applied them into
// the storm, so that a tail can be matched with what the exporter did then.
func logSlowest(b *testing.B, seen, applied map[string]time.Time, t0 time.Time) {
	type slow struct {
		at, took time.Duration
	}
	var all []slow
	for id, s := range seen {
		if a, ok := applied[id]; ok {
			all = append(all, slow{a.Sub(t0), s.Sub(a)})
		}
	}
	slices.SortFunc(all, func(x, y slow) int { return int(y.took - x.took) })
	var parts []string
	for _, s := range all[:min(len(all), 12)] {
		parts = append(parts, fmt.Sprintf("%.1fs at %.1fs", s.took.Seconds(), s.at.Seconds()))
	}
	b.Logf("slowest changes to /metrics (took, applied into the storm): %s", strings.Join(parts, ", "))
}

// stormRig is the simulator and the exporter of the storm, steady: every eligible VM checked
// once, the push channel open.
type stormRig struct {
	simURL, token, natsAddr, metrics string
	proc                             *replicaProc
	scrapers                         *stormScrape
}

func startStormRig(b *testing.B) *stormRig {
	exporter := testutil.Build(b, "cmd/veil-exporter")
	simBin := testutil.Build(b, "cmd/veil-sim")
	dir := b.TempDir()
	r := &stormRig{token: "storm-bench-token", natsAddr: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(b))}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(r.token), 0o600); err != nil {
		b.Fatal(err)
	}
	sims, _ := startSims(b, simBin, 1, "--token", r.token, "--seed", "3", "--vms", strconv.Itoa(stormVMs), "--nodes", "500",
		"--datapools", "50", "--clusters", "5", "--latency", "1ms", "--event-rate", "0", "--running-fraction", "0.7",
		"--change-log", "200000")
	r.simURL = sims[0]
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(`controllers:
  - {name: storm, url: %s, token_file: %s, max_concurrency: 32, max_requests_per_second: 20000}
collect: {interval: 30s}
guest: {enabled: true, ping_interval: %s, concurrency: 32}
events: {enabled: true, poll_interval: 500ms, start: latest, checkpoint: {store: nats_kv}}
nats:
  url: nats://%s
  embedded: {enabled: true, listen: "%s", store_dir: %s}
`, r.simURL, tok, stormPingInterval, r.natsAddr, r.natsAddr, filepath.Join(dir, "nats"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	r.proc = &replicaProc{t: b, bin: exporter, cfg: cfg, web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(b)), logPath: filepath.Join(dir, "exporter.log")}
	r.proc.start()
	b.Cleanup(func() { r.proc.signal(syscall.SIGKILL); r.proc.wait() })
	r.metrics = "http://" + r.proc.web + "/metrics"
	// Prometheus scrapes from the exporter's start: by the storm, every format has been asked
	// for and is prepared at each render, as on a site (a format first asked for during the
	// storm is made for every block by that scrape, while the renders wait).
	r.scrapers = stormScrapers(r.metrics)

	pushOpen := regexp.MustCompile(`(?m)^veil_push_mode\{[^}]*mode="push"[^}]*\} 1$`)
	testutil.Eventually(b, 10*time.Minute, func() bool {
		raw, _, err := scrapeOnce(r.metrics)
		if err != nil {
			return false
		}
		e, c := sumSamples([]byte(raw), "veil_guest_eligible_domains"), sumSamples([]byte(raw), "veil_guest_checked_domains")
		return e > 0 && e == c && pushOpen.MatchString(raw)
	}, "every eligible VM checked and the push channel open")
	return r
}

// watch reads /metrics every stormPoll until each of ids shows as on, and returns when each
// was first seen so; it fails the benchmark at deadline, saying when the simulator applied
// the power-on of those never seen.
func (r *stormRig) watch(b *testing.B, ids []string, deadline time.Time) map[string]time.Time {
	seen := map[string]time.Time{}
	pending := map[string]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	tick := time.NewTicker(stormPoll)
	defer tick.Stop()
	for ; len(pending) > 0 && time.Now().Before(deadline); <-tick.C {
		at := time.Now()
		on, err := poweredOn(r.metrics)
		if err != nil {
			b.Fatalf("scrape during the storm: %v", err)
		}
		for id := range pending {
			if on[id] {
				seen[id] = at
				delete(pending, id)
			}
		}
	}
	if len(pending) > 0 {
		applied := poweredOnAt(b, r.simURL, r.token, ids)
		var some []string
		for id := range pending {
			if len(some) < 5 {
				some = append(some, fmt.Sprintf("%s (applied %v before the deadline)", id, deadline.Sub(applied[id]).Round(time.Millisecond)))
			}
		}
		b.Fatalf("%d of %d VMs turned on never showed as on in /metrics: %s", len(pending), len(ids), strings.Join(some, ", "))
	}
	return seen
}

// stormCandidates are stormStarts VMs that are off and no templates.
func stormCandidates(b *testing.B, client *veil.Client) []string {
	all, err := client.Domains(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var off []string
	for _, d := range all {
		if !d.Template && d.UserPowerState == veil.PowerOff && len(off) < stormStarts {
			off = append(off, d.ID)
		}
	}
	if len(off) < stormStarts {
		b.Fatalf("%d VMs off, want %d", len(off), stormStarts)
	}
	return off
}

// stormStart powers on ids evenly over stormDuration, as the platform's users do: one POST
// /api/domains/{id}/start/ each, which makes a task and its events. Each request is sent at its
// time on its own: the platform answers a start when its task ends.
func stormStart(ctx context.Context, simURL, token string, ids []string) error {
	every := stormDuration / time.Duration(len(ids))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- startVM(ctx, simURL, token, id)
		}()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

func startVM(ctx context.Context, simURL, token, id string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, simURL+"/api/domains/"+id+"/start/", bytes.NewReader([]byte("{}")))
	req.Header.Set("Authorization", "jwt "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("start %s: %s", id, resp.Status)
	}
	return nil
}

// poweredOn reads /metrics as a scraper does (gzip) and returns the VMs whose power state is on.
// It reads the body whole, then decompresses only up to the end of veil_domain_power_state:
// this process shares the cores with the exporter, and decompressing and scanning every read
// in full (28 MB of text at 10,000 VMs, four times a second) took the better part of a core
// from what is measured.
func poweredOn(u string) (map[string]bool, error) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	// Read whole, then decompressed: a scrape in flight pauses the exporter's renders, and one
	// read at the pace of its decompression would hold them for what is measured here.
	gz, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	zr, err := kgzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return powerStates(bufio.NewReaderSize(zr, 1<<20))
}

// powerStates scans text exposition for veil_domain_power_state's series of state "on" and
// stops at the end of that family.
func powerStates(r *bufio.Reader) (map[string]bool, error) {
	on := map[string]bool{}
	prefix := []byte("veil_domain_power_state{")
	in := false
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, errors.New("a line of /metrics over 1 MiB")
		}
		if bytes.HasPrefix(line, prefix) {
			in = true
			if bytes.Contains(line, []byte(`state="on"`)) {
				if _, rest, ok := bytes.Cut(line, []byte(`domain_id="`)); ok {
					if id, _, ok := bytes.Cut(rest, []byte(`"`)); ok {
						on[string(id)] = true
					}
				}
			}
		} else if in && len(line) > 0 && line[0] != '#' {
			return on, nil // the family ended
		}
		if err == io.EOF {
			if !in {
				return nil, errors.New("/metrics has no veil_domain_power_state")
			}
			return on, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// poweredOnAt reads the simulator's change log: when each of ids was first seen powered on.
func poweredOnAt(b *testing.B, simURL, token string, ids []string) map[string]time.Time {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	req, _ := http.NewRequest(http.MethodGet, simURL+"/_sim/changes?since=0", nil)
	req.Header.Set("Authorization", "jwt "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var changes []struct {
		Resource string          `json:"resource"`
		ID       string          `json:"id"`
		Time     time.Time       `json:"time"`
		Object   json.RawMessage `json:"object"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&changes); err != nil {
		b.Fatalf("the change log: %v", err)
	}
	at := map[string]time.Time{}
	for _, c := range changes {
		if c.Resource != "/domains/" || !want[c.ID] || !at[c.ID].IsZero() {
			continue
		}
		var d struct {
			Power int `json:"user_power_state"`
		}
		if json.Unmarshal(c.Object, &d) == nil && d.Power == veil.PowerOn {
			at[c.ID] = c.Time
		}
	}
	return at
}

// stormFeed measures each event's delay from its created to its arrival on NATS.
type stormFeed struct {
	nc      *nats.Conn
	mu      sync.Mutex
	delays  []float64
	created []time.Time // of the event of each delay
}

// logSlowest logs the slowest events to NATS, with when they were created into the storm.
func (f *stormFeed) logSlowest(b *testing.B, t0 time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	idx := make([]int, len(f.delays))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(x, y int) int { return cmp.Compare(f.delays[y], f.delays[x]) })
	var parts []string
	for _, i := range idx[:min(len(idx), 12)] {
		parts = append(parts, fmt.Sprintf("%.1fs at %.1fs", f.delays[i], f.created[i].Sub(t0).Seconds()))
	}
	b.Logf("slowest events to NATS (took, created into the storm): %s", strings.Join(parts, ", "))
}

func stormEvents(b *testing.B, addr string) *stormFeed {
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	f := &stormFeed{nc: nc}
	if _, err := nc.Subscribe("veil.events.>", func(m *nats.Msg) {
		now := time.Now()
		var e struct {
			Created time.Time `json:"created"`
		}
		if json.Unmarshal(m.Data, &e) != nil || e.Created.IsZero() {
			return
		}
		f.mu.Lock()
		f.delays = append(f.delays, max(now.Sub(e.Created), 0).Seconds())
		f.created = append(f.created, e.Created)
		f.mu.Unlock()
	}); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return f
}

// stop ends the subscription and returns the delays measured (idempotent).
func (f *stormFeed) stop() []float64 {
	if f.nc != nil && !f.nc.IsClosed() {
		_ = f.nc.Drain()
		for !f.nc.IsClosed() {
			time.Sleep(10 * time.Millisecond) // Drain closes the connection when it is done
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.delays)
}

// stormScrape is Prometheus at 15 s: every format in turn, gzip, bodies read in full.
type stormScrape struct {
	cancel context.CancelFunc
	done   chan int
}

func stormScrapers(u string) *stormScrape {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stormScrape{cancel: cancel, done: make(chan int, 1)}
	go func() {
		n := 0
		defer func() { s.done <- n }()
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		for {
			for _, f := range scrapeFormats {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				req.Header.Set("Accept", f.accept)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					n++
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the scrapers and returns how many scrapes were answered (call once).
func (s *stormScrape) stop() int {
	s.cancel()
	n := <-s.done
	s.done <- n
	return n
}

// quantile is the q-quantile of vs (sorted in place); 0 when empty.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[min(int(float64(len(vs))*q), len(vs)-1)]
}
