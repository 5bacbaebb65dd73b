// The exporters BenchmarkScrape measures the peak memory of: one fresh bin/veil-exporter per
// way of scraping it (protobuf only, text only, all three formats), all started together on the
// same simulator so that their guest sweeps overlap, each scraped only in its own formats from
// its start, so that what it holds is what a site scraping that way makes it hold. Above
// 10,000 VMs, where two sweeps at once are bound by the cores, one exporter is scraped in
// protobuf only and then in all three formats.

package e2e

import (
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// memoryMode is a way of scraping one exporter: the formats (indexes in scrapeFormats) its
// scrapers ask for, up to how many VMs (0: any).
type memoryMode struct {
	name    string
	formats []int
	maxVMs  int
}

// memoryModes: Prometheus with native histograms (protobuf), Prometheus asking for text, and
// three kinds of scrapers at once. The last is the one whose scrapes are timed. Every exporter
// makes the simulator answer its own guest sweep, and at 50,000 VMs those sweeps are bound by
// the cores, not by the ping interval: text, which holds the least, is measured at 10,000 only,
// and all three formats by the protobuf exporter after its figure (allAfterProtobuf).
var memoryModes = []memoryMode{
	{"protobuf", []int{2}, 0},
	{"text", []int{0}, separateUpTo},
	{"all", []int{0, 1, 2}, separateUpTo},
}

// separateUpTo is the largest inventory each way of scraping is measured on an exporter of its
// own.
const separateUpTo = 10000

// guestPingInterval is the exporters' guest.ping_interval (the default), and their
// fsinfo_interval, network_interval and stats_interval (a minute by default): a VM's first
// reads of those are made at its place in their interval, so that with the four equal the end
// of the first sweep is when every VM has every series but its OS and clock (read every 10 and
// 5 minutes), and the peak measured is of that state. With a minute's reads and pings every
// 30 s: 277,000 series of 336,000 at 10,000 VMs.
const guestPingInterval = 30 * time.Second

// allAfterProtobuf makes m, the protobuf-only exporter whose figure was reported, the exporter
// scraped in all three formats from now on: its peak so far is the protobuf figure, and the
// figure of all three, reported after scrapes in all three formats for a ping interval, is the
// peak of both. Formats not asked for are not held, so the protobuf figure does not include
// them; once asked for, every block gets their form and every guest check renders them.
func (m *modeProc) allAfterProtobuf() *modeProc {
	return &modeProc{mode: memoryModes[len(memoryModes)-1], p: m.p, metrics: m.metrics, switched: time.Now()}
}

// scrapeUntilCycle scrapes m every scrapeEvery in its formats until a guest ping interval has
// passed since it was switched to them (allAfterProtobuf), so that every VM's guest series were
// rendered again while all its formats were asked for.
func (m *modeProc) scrapeUntilCycle(b *testing.B) {
	if m.switched.IsZero() {
		return
	}
	s := &scraper{b: b, client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
	for n := 0; time.Since(m.switched) < guestPingInterval; n++ {
		s.get(m.metrics, scrapeFormats[m.mode.formats[n%len(m.mode.formats)]].accept)
		wait := min(scrapeEvery/time.Duration(len(m.mode.formats)), guestPingInterval-time.Since(m.switched))
		time.Sleep(wait) // scraping at Prometheus' pace for a span of time, not waiting for an outcome
	}
}

// modeProc is one exporter of a memory mode.
type modeProc struct {
	mode    memoryMode
	p       *replicaProc
	metrics string
	sweep   time.Duration
	// switched is when an exporter measured in another mode began to be scraped in this one
	// (zero: in this mode from its start).
	switched time.Time
}

// startModeProcs starts one exporter per memory mode of vms on cfg, each killed when b ends.
func startModeProcs(b *testing.B, bin, cfg, dir string, vms int) []*modeProc {
	var out []*modeProc
	for _, m := range memoryModes {
		if m.maxVMs != 0 && vms > m.maxVMs {
			continue
		}
		p := &replicaProc{t: b, bin: bin, cfg: cfg, web: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(b)), logPath: filepath.Join(dir, "exporter-"+m.name+".log")}
		p.start()
		b.Cleanup(func() { killProc(p) })
		out = append(out, &modeProc{mode: m, p: p, metrics: "http://" + p.web + "/metrics"})
	}
	return out
}

// killProc kills p unless it has ended, and waits for it.
func killProc(p *replicaProc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// hwm is the peak resident memory of the exporter, in MiB.
func (m *modeProc) hwm(b *testing.B) float64 { return peakRSS(b, m.p.cmd.Process.Pid) }

// waitGuestSweeps waits until every exporter of procs has checked every eligible VM, as its
// status page says (read once a second, a few kilobytes), and records how long each took; then
// until its /metrics says so too (a render later).
// Meanwhile each is scraped as Prometheus would, every scrapeEvery in its mode's formats in
// turn, the body read as it comes (gzip, not decompressed): a scrape at 50,000 VMs decompressed
// and parsed costs this process a second of the CPU the sweeps need, and a client slower than
// the exporter's write timeout gets its answer cut.
func waitGuestSweeps(b *testing.B, procs []*modeProc) {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, m := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.waitSweep(b, 15*time.Minute)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// scrapeEvery is how often the exporters are scraped while their sweeps run.
const scrapeEvery = 15 * time.Second

func (m *modeProc) waitSweep(b *testing.B, timeout time.Duration) error {
	start := time.Now()
	s := &scraper{b: b, client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
	var last error
	var scraped time.Time
	for n := 0; time.Since(start) < timeout; {
		if time.Since(scraped) >= scrapeEvery {
			scraped = time.Now()
			if _, err := s.try(m.metrics, scrapeFormats[m.mode.formats[n%len(m.mode.formats)]].accept); err != nil {
				last = err
			}
			n++
		}
		eligible, checked, err := guestCoverage("http://" + m.p.web + "/?format=json")
		if err == nil && eligible > 0 && eligible == checked {
			if m.sweep == 0 {
				m.sweep = time.Since(start)
			}
			eligible, checked, err = renderedCoverage(m.metrics, scrapeFormats[m.mode.formats[0]].accept)
			if err == nil && eligible > 0 && eligible == checked {
				return nil
			}
		}
		last = cmpErr(err, fmt.Errorf("%d of %d eligible VMs checked", checked, eligible))
		time.Sleep(time.Second)
	}
	return fmt.Errorf("exporter %s: no full guest sweep in %v: %v", m.mode.name, timeout, last)
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// guestCoverage reads the guest coverage of the one controller from the status page's JSON.
func guestCoverage(status string) (eligible, checked int, err error) {
	resp, err := http.Get(status)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Controllers []struct {
			Guest *struct{ Eligible, Checked int }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, 0, err
	}
	if len(st.Controllers) != 1 || st.Controllers[0].Guest == nil {
		return 0, 0, fmt.Errorf("status page: %d controllers, guest checks %v", len(st.Controllers), len(st.Controllers) == 1)
	}
	return st.Controllers[0].Guest.Eligible, st.Controllers[0].Guest.Checked, nil
}

var guestCovered = regexp.MustCompile(`(?m)^veil_guest_(eligible|checked)_domains\{controller="bench"\} (\d+)$`)

// renderedCoverage scrapes metrics asking for accept (and gzip) and returns the exporter's
// veil_guest_eligible_domains and veil_guest_checked_domains: the status page says what the
// checker knows, these what a scrape serves, a render later.
func renderedCoverage(metrics, accept string) (eligible, checked int, err error) {
	req, _ := http.NewRequest("GET", metrics, nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if body, err = gzip.NewReader(resp.Body); err != nil {
			return 0, 0, err
		}
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return 0, 0, err
	}
	got := map[string]int{}
	if strings.Contains(resp.Header.Get("Content-Type"), "protobuf") {
		got, err = protoGauges(raw, "veil_guest_eligible_domains", "veil_guest_checked_domains")
	} else {
		for _, m := range guestCovered.FindAllSubmatch(raw, -1) {
			got["veil_guest_"+string(m[1])+"_domains"], _ = strconv.Atoi(string(m[2]))
		}
	}
	return got["veil_guest_eligible_domains"], got["veil_guest_checked_domains"], err
}

// protoGauges reads the gauges named names from a delimited protobuf answer, unmarshalling only
// their families.
func protoGauges(raw []byte, names ...string) (map[string]int, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	got := map[string]int{}
	for len(raw) > 0 {
		size, n := binary.Uvarint(raw)
		if n <= 0 || uint64(len(raw)-n) < size {
			return nil, errors.New("truncated protobuf answer")
		}
		msg := raw[n : n+int(size)]
		raw = raw[n+int(size):]
		num, typ, tn := protowire.ConsumeTag(msg)
		if tn < 0 || num != 1 || typ != protowire.BytesType {
			continue
		}
		name, _ := protowire.ConsumeBytes(msg[tn:])
		if !want[string(name)] {
			continue
		}
		var mf dto.MetricFamily
		if err := proto.Unmarshal(msg, &mf); err != nil {
			return nil, err
		}
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = int(m.GetGauge().GetValue())
		}
	}
	return got, nil
}

// scrapeOnly scrapes m rounds times in its one format, as its scrapers would, so that it holds
// what they make it hold.
func (m *modeProc) scrapeOnly(b *testing.B, rounds int) {
	s := &scraper{b: b, client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
	for range rounds {
		for _, f := range m.mode.formats {
			s.get(m.metrics, scrapeFormats[f].accept)
		}
	}
}
