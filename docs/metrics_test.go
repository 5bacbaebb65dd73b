package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

var update = flag.Bool("update", false, "write docs/metrics.md from the families the exporter serves")

const regenerate = "make docs (go test ./docs -run '^TestMetrics$' -update)"

// lateFamilies have series only once something happened: a guest sweep with every statistic
// read, a task seen finishing, a device detail read, an odd object, a failed guest command. The
// doc is written when they and every family it already lists are served.
var lateFamilies = []string{
	"veil_guest_ping_success", "veil_guest_sweep_duration_seconds", "veil_guest_os_info",
	"veil_guest_filesystem_size_bytes", "veil_guest_clock_offset_seconds",
	"veil_guest_network_receive_bytes_total", "veil_guest_disk_read_bytes_total",
	"veil_guest_cpu_seconds_total", "veil_guest_load1", "veil_guest_command_errors_total",
	"veil_tasks_finished_total", "veil_task_duration_seconds",
	"veil_vdisk_snapshots", "veil_domain_interface_up", "veil_objects_rejected_total",
}

// TestMetrics runs the veil-exporter binary with every feature on (inventory with push and
// device details, guest checks with statistics, events, the inventory on NATS, replicas) against
// the simulator and a NATS server, and checks what /metrics serves: every family is documented in
// docs/metrics.md exactly as served (name, type, labels, help), and lints clean.
func TestMetrics(t *testing.T) {
	want := documented(t)
	fams := servedFamilies(t, append(slices.Clone(lateFamilies), want...))

	t.Run("lint", func(t *testing.T) { lintFamilies(t, fams) })

	got := renderDoc(fams)
	if *update {
		if err := os.WriteFile("metrics.md", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatalf("%v; run %s", err, regenerate)
	}
	if !bytes.Equal(old, got) {
		t.Errorf("docs/metrics.md differs from the families the exporter serves; run %s\n%s", regenerate, lineDiff(string(old), string(got)))
	}
}

// documented lists the families docs/metrics.md names (none when it does not exist yet).
func documented(t *testing.T) []string {
	b, err := os.ReadFile("metrics.md")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range documentedFamily.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	return names
}

var documentedFamily = regexp.MustCompile("(?m)^\\| `([a-z_:0-9]+)` \\|")

// servedFamilies starts the exporter and returns its families once every one of wait is served.
func servedFamilies(t *testing.T, wait []string) map[string]*dto.MetricFamily {
	listen := startDocsExporter(t, docsSimulator(t))
	var fams map[string]*dto.MetricFamily
	testutil.EventuallyNil(t, 240*time.Second, func() error {
		var err error
		if fams, err = scrape("http://" + listen + "/metrics"); err != nil {
			return err
		}
		var missing []string
		for _, w := range wait {
			if fams[w] == nil {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not served: %s (a family docs/metrics.md lists that the code no longer serves? run %s)", strings.Join(missing, ", "), regenerate)
		}
		return nil
	}, "waiting for every family")
	return fams
}

// docsSimulator is a small platform with one odd object and one failed guest command, so that
// their families have series.
func docsSimulator(t *testing.T) *veiltest.Server {
	sim := veiltest.New(veiltest.Options{Token: testutil.SecretToken, Seed: 1, VMs: 12, EventRate: 20, TaskDuration: 50 * time.Millisecond})
	t.Cleanup(sim.Close)
	ids := sim.DomainIDs()
	if err := sim.SetOddFields(veiltest.OddField{Collection: "domains", ID: ids[len(ids)-1], Field: "memory_count", Value: json.RawMessage(`"n/a"`)}); err != nil {
		t.Fatal(err)
	}
	failing := ""
	for _, id := range ids {
		if d, _ := sim.Domain(id); d.Linux && d.AgentActive && d.PowerState == 3 && !d.Template {
			failing = id
			break
		}
	}
	if failing == "" {
		t.Fatal("the simulator runs no Linux VM with a guest agent")
	}
	if err := sim.SetGuestCommandError(failing, "guest-get-time", "The command guest-get-time has been disabled"); err != nil {
		t.Fatal(err)
	}
	return sim
}

// startDocsExporter runs the exporter with every feature on against sim and a NATS server, and
// returns the address it listens on.
func startDocsExporter(t *testing.T, sim *veiltest.Server) string {
	exporter := testutil.Build(t, "cmd/veil-exporter")
	dir := t.TempDir()
	nats := testutil.StartNATS(t)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(testutil.SecretToken), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cfg := "controllers:\n" + testutil.ControllerYAML("docs", sim.URL, tok) + `collect:
  interval: 1s
  device_details_interval: 1m
guest:
  ping_interval: 1s
  osinfo_interval: 1s
  fsinfo_interval: 1s
  time_interval: 1s
  network_interval: 1s
  stats_interval: 1s
events:
  poll_interval: 1s
  checkpoint: {store: nats_kv}
nats:
  url: ` + nats.URL() + `
ha:
  enabled: true
  lease_ttl: 3s
`
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logPath := filepath.Join(dir, "exporter.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exporter, "--config.file", cfgPath, "--web.listen-address", listen, "--web.disable-exporter-metrics")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		testutil.RaceReport(t, "veil-exporter", logPath)
	})
	return listen
}

func scrape(u string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// labelNames are the label names of a family's series, sorted (le and quantile left out).
func labelNames(mf *dto.MetricFamily) []string {
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			seen[l.GetName()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		if n != "le" && n != "quantile" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

var cell = strings.NewReplacer("|", `\|`, "\n", " ")

func renderDoc(fams map[string]*dto.MetricFamily) []byte {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString(`# Metrics

<!-- Generated by ` + "`" + regenerate + "`" + `: do not edit. -->

Every family veil-exporter serves on ` + "`/metrics`" + `, as the code describes it: name, type, label names and
HELP text. The list is what the exporter serves with every feature on (the push channel, device
details, guest checks with their statistics, events, the inventory on NATS, replicas), read from
a running exporter against the simulator (` + "`docs/metrics_test.go`" + `); HELP texts are fixed,
naming the settings they depend on. Besides these, the standard ` + "`go_*`" + `, ` + "`process_*`" + ` and
` + "`promhttp_metric_handler_*`" + ` families are served unless ` + "`--web.disable-exporter-metrics`" + `.
What the families mean, when they are absent and how to join them: [the metrics guide](metrics-guide.md).

| family | type | labels | help |
|---|---|---|---|
`)
	for _, n := range names {
		mf := fams[n]
		labels := labelNames(mf)
		for i, l := range labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, strings.ToLower(mf.GetType().String()), strings.Join(labels, ", "), cell.Replace(mf.GetHelp()))
	}
	return b.Bytes()
}

// lineDiff names the first lines that differ, enough to see what drifted.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	in := func(s string, l []string) bool { return slices.Contains(l, s) }
	var out []string
	for _, l := range al {
		if !in(l, bl) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !in(l, al) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], "...")
	}
	return strings.Join(out, "\n")
}

// nonBaseUnit matches name parts that are not base units (promlint knows more, as whole words).
var nonBaseUnit = regexp.MustCompile(`_(percent|percentage|ms|milliseconds|microseconds|nanoseconds|minutes|hours|days|kb|mb|gb|kib|mib|gib|kilobytes|megabytes|gigabytes|bits)(_|$)`)

// lintFamilies: every family is promlint clean, named veil_*, and in base units.
func lintFamilies(t *testing.T, fams map[string]*dto.MetricFamily) {
	list := make([]*dto.MetricFamily, 0, len(fams))
	for n, mf := range fams {
		list = append(list, mf)
		// go_*, process_* and promhttp_* are the standard collectors, left out here by
		// --web.disable-exporter-metrics; nothing else is exempt.
		if !strings.HasPrefix(n, "veil_") {
			t.Errorf("%s: want the prefix veil_", n)
		}
		if nonBaseUnit.MatchString(n) {
			t.Errorf("%s: want base units (seconds, bytes, a ratio 0..1)", n)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
