// The scrape's figures for make bench: a real bin/veil-exporter with guest checks on against a
// bin/veil-sim of 10,000 and 50,000 VMs, scraped as Prometheus scrapes (its Accept header,
// gzip), against the floor of the same compressed bytes served from memory over the same
// loopback, alternately in the same run; and the peak resident memory of exporters scraped in
// one format or in all three.

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// promAccept is the Accept header of Prometheus 3 without native histograms.
const promAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// scrapeFormats are the Accept headers of the scrapes measured: Prometheus asking for the text
// format first (scrape_protocols: [PrometheusText0.0.4]), Prometheus 3 by default (OpenMetrics
// first), and Prometheus with native histograms (protobuf first).
var scrapeFormats = []struct{ name, accept string }{
	{"text", "text/plain;version=0.0.4;q=1,*/*;q=0.1"},
	{"openmetrics", promAccept},
	{"protobuf", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"},
}

// BenchmarkScrape runs once per size whatever b.N (make bench asks for 1x); sizes from
// VEIL_BENCH_SCRAPE_SIZES (default "10000 50000"). Per size it starts one fresh exporter per
// memory mode (memoryModes: protobuf only, and up to 10,000 VMs text only and all three
// formats) on one simulator, waits until each has had its guest checks (its status page says),
// scraping each every 15 s in its own formats meanwhile, and reports hwm-MiB-<mode> and
// sweep-s-<mode> (how long its first full guest coverage took) after the one-format exporters
// had 100 scrapes more. Above 10,000 VMs the protobuf exporter, once reported, is the one
// scraped in all three formats. Then it scrapes the all-formats exporter 200 times (150 above
// 10,000 VMs) in each of scrapeFormats, each scrape followed by one of the floor (the same
// compressed bytes of that format from memory), the formats interleaved, and reports per format (suffix -text,
// -openmetrics, -protobuf) scrape-ms and floor-ms (medians), scrape-p99-ms and floor-p99-ms,
// ratio-median (to the floor's median, target 3), ratio-p99 (to the floor's p99, target 5) and
// gzip-MB; then series, hwm-MiB-all (after scrapes in all three formats for at least a guest
// ping interval) and rss-MiB of that exporter.
func BenchmarkScrape(b *testing.B) {
	sizes := strings.Fields(os.Getenv("VEIL_BENCH_SCRAPE_SIZES"))
	if len(sizes) == 0 {
		sizes = []string{"10000", "50000"}
	}
	exporter := testutil.Build(b, "cmd/veil-exporter")
	simBin := testutil.Build(b, "cmd/veil-sim")
	for _, s := range sizes {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("VEIL_BENCH_SCRAPE_SIZES: %v", err)
		}
		b.Run("vms="+s, func(b *testing.B) { benchScrape(b, exporter, simBin, n) })
	}
}

func benchScrape(b *testing.B, exporter, simBin string, vms int) {
	phases := newPhaseLog(b)
	defer phases.done("the timed exporter's last scrapes and its figures")
	dir := b.TempDir()
	cfg := scrapeSetup(b, simBin, dir, vms)
	procs := startModeProcs(b, exporter, cfg, dir, vms)
	phases.done("the simulator and the exporters' start")
	waitGuestSweeps(b, procs)
	phases.done("the guest sweeps")
	// The one-format exporters are scraped, measured and ended first, so that the scrapes timed
	// have the cores to themselves (but for the simulator's refreshes).
	all := procs[len(procs)-1]
	if all.mode.name != "all" {
		all.scrapeOnly(b, oneFormatRounds)
		all.report(b)
		all = all.allAfterProtobuf()
	}
	for _, m := range procs[:len(procs)-1] {
		m.scrapeOnly(b, oneFormatRounds)
		m.report(b)
		killProc(m.p)
	}
	metrics := all.metrics
	phases.done("the one-format exporters' scrapes")

	get := (&scraper{b: b, client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}).get
	ms := make([]*scrapeMeasure, len(scrapeFormats))
	for i, f := range scrapeFormats {
		_, got, hdr := get(metrics, f.accept)
		last := bytes.Clone(got)
		ms[i] = &scrapeMeasure{gzipMB: float64(len(last)) / 1e6}
		ms[i].floor = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", hdr.Get("Content-Type"))
			w.Header().Set("Content-Encoding", hdr.Get("Content-Encoding"))
			_, _ = w.Write(last)
		}))
		defer ms[i].floor.Close()
	}
	// 200 rounds up to 10,000 VMs, 150 above (a round of 50,000 VMs is 0.35 s; make bench's whole
	// run has a goal): the p99 is the second slowest of either.
	rounds := 200
	if vms > 10000 {
		rounds = 150
	}
	for range rounds {
		for i, f := range scrapeFormats {
			d, _, _ := get(metrics, f.accept)
			ms[i].scrapes = append(ms[i].scrapes, d.Seconds()*1000)
			d, _, _ = get(ms[i].floor.URL, f.accept)
			ms[i].floors = append(ms[i].floors, d.Seconds()*1000)
		}
	}
	phases.done("the timed scrapes")
	reportScrapes(b, ms)
	reportSeries(b, metrics)
	all.scrapeUntilCycle(b)
	all.report(b)
	b.ReportMetric(statusKB(b, all.p.cmd.Process.Pid, "VmRSS:")/1024, "rss-MiB")
}

// scrapeSetup starts the simulator of vms VMs and writes the exporters' configuration into dir;
// it returns the configuration's path.
func scrapeSetup(b *testing.B, simBin, dir string, vms int) string {
	const token = "scrape-bench-token"
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	sims, _ := startSims(b, simBin, 1, "--token", token, "--seed", "1", "--vms", strconv.Itoa(vms), "--nodes", "500",
		"--datapools", "50", "--clusters", "5", "--latency", "1ms", "--event-rate", "0")
	simURL := sims[0]
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(`controllers:
  - name: bench
    url: %s
    token_file: %s
    max_concurrency: 32
    max_requests_per_second: 20000
collect:
  interval: 30s
guest:
  enabled: true
  ping_interval: %[3]s
  fsinfo_interval: %[3]s
  network_interval: %[3]s
  stats_interval: %[3]s
  concurrency: 32
events:
  enabled: false
`, simURL, tok, guestPingInterval)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// phaseLog says how long each part of a long benchmark took (make bench's whole run has a goal).
type phaseLog struct {
	b    *testing.B
	last time.Time
}

func newPhaseLog(b *testing.B) *phaseLog { return &phaseLog{b: b, last: time.Now()} }

// done logs how long what ended now took since the last one.
func (p *phaseLog) done(what string) {
	p.b.Helper()
	p.b.Logf("%s: %.0f s", what, time.Since(p.last).Seconds())
	p.last = time.Now()
}

// oneFormatRounds is how many scrapes the one-format exporters get after their sweep: enough
// for every family to have been asked for and served many times, as the timed exporter's are.
const oneFormatRounds = 100

// report reports the exporter's peak resident memory (hwm-MiB-<mode>) and how long its first
// full guest sweep took (sweep-s-<mode>).
func (m *modeProc) report(b *testing.B) {
	b.ReportMetric(m.hwm(b), "hwm-MiB-"+m.mode.name)
	if m.switched.IsZero() {
		b.ReportMetric(m.sweep.Seconds(), "sweep-s-"+m.mode.name)
	}
}

// scraper reads answers into one buffer, reused, as Prometheus' scrape loop reuses its buffers:
// a new one per read makes the client collect garbage, which both the scrape and the floor then
// wait for.
type scraper struct {
	b      *testing.B
	client *http.Client
	buf    bytes.Buffer
}

// get reads u asking for accept (and gzip), and returns how long it took, the body (valid until
// the next get) and the headers.
func (s *scraper) get(u, accept string) (time.Duration, []byte, http.Header) {
	t0 := time.Now()
	resp, err := s.try(u, accept)
	d := time.Since(t0)
	if err != nil {
		s.b.Fatal(err)
	}
	return d, s.buf.Bytes(), resp.Header
}

// try reads u asking for accept (and gzip) into s.buf.
func (s *scraper) try(u, accept string) (*http.Response, error) {
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	s.buf.Reset()
	_, err = s.buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	return resp, nil
}

// scrapeMeasure is what benchScrape measured of one format: the scrapes of the exporter and of
// a floor server answering the same bytes, in milliseconds, and the size of the answer.
type scrapeMeasure struct {
	floor           *httptest.Server
	scrapes, floors []float64
	gzipMB          float64
}

// reportScrapes reports, per format, the median and p99 of the scrapes and of the floor, their
// ratios and the size of the answer.
func reportScrapes(b *testing.B, ms []*scrapeMeasure) {
	for i, f := range scrapeFormats {
		m := ms[i]
		slices.Sort(m.scrapes)
		slices.Sort(m.floors)
		med, p99 := m.scrapes[len(m.scrapes)/2], m.scrapes[len(m.scrapes)*99/100]
		floor, floorP99 := m.floors[len(m.floors)/2], m.floors[len(m.floors)*99/100]
		b.ReportMetric(med, "scrape-ms-"+f.name)
		b.ReportMetric(p99, "scrape-p99-ms-"+f.name)
		b.ReportMetric(floor, "floor-ms-"+f.name)
		b.ReportMetric(floorP99, "floor-p99-ms-"+f.name)
		b.ReportMetric(med/floor, "ratio-median-"+f.name)
		b.ReportMetric(p99/floorP99, "ratio-p99-"+f.name)
		b.ReportMetric(m.gzipMB, "gzip-MB-"+f.name)
	}
}

// reportSeries reports the number of series the exporter at metrics serves.
func reportSeries(b *testing.B, metrics string) {
	raw, _, err := scrapeOnce(metrics)
	if err != nil {
		b.Fatal(err)
	}
	series := 0
	for _, l := range strings.Split(raw, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			series++
		}
	}
	b.ReportMetric(float64(series), "series")
}

// scrapeOnce returns /metrics as text (the client decompresses).
func scrapeOnce(u string) (string, http.Header, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return string(raw), resp.Header, err
}

// startSims starts bin/veil-sim with args on free ports and returns the URLs of its n
// controllers and its pid.
func startSims(b *testing.B, bin string, n int, args ...string) ([]string, int) {
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	testutil.DieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "veil-sim listening on "); ok {
				urls <- u
			}
		}
		close(urls)
	}()
	var got []string
	timeout := time.After(2 * time.Minute)
	for len(got) < n {
		select {
		case u, ok := <-urls:
			if !ok {
				b.Fatalf("veil-sim ended after %d of %d controllers", len(got), n)
			}
			got = append(got, u)
		case <-timeout:
			b.Fatalf("veil-sim started %d of %d controllers in 2 minutes", len(got), n)
		}
	}
	go func() {
		for range urls { // the rest of its output
		}
	}()
	return got, cmd.Process.Pid
}

// statusKB reads a field of /proc/pid/status in kB.
func statusKB(b *testing.B, pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	return 0
}
