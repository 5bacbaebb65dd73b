// Package e2e runs the product as an operator does: the simulator, the veil-exporter binary with
// an embedded NATS server, a real Prometheus scraping it with the shipped alert rules, the shipped
// dashboards' queries against that Prometheus, and the status page in headless Chromium.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/dashboards"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// need returns the path of a program the test cannot do without. The programs come from
// Debian's packages, which .ci/run installs; a missing one fails the test, it is never skipped.
func need(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatalf("%s not found: install Debian's package (.ci/run does: apt-get install prometheus chromium)", names[0])
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// start runs a program until the test ends, its output going to a file that is printed when the
// test fails.
func start(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, filepath.Base(name)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	testutil.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		testutil.RaceReport(t, filepath.Base(name), logPath)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("--- %s (tail)\n%s", filepath.Base(name), b)
		}
	})
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", u, resp.Status, b)
	}
	return b
}

type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

func promQuery(promURL, q string) (promResult, error) {
	var r promResult
	resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, err
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	return r, nil
}

// TestOperatorKit runs the exporter, Prometheus and the status page against the simulator in
// both of its profiles: the shapes the vendor's clients disagree on must all decode.
func TestOperatorKit(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	// The two profiles share nothing (each its simulator, exporter, Prometheus servers, ports
	// and directories): they run at once, most of their time being waits for scrapes.
	for _, profile := range []string{veiltest.ProfileDefault, veiltest.ProfileAlternative} {
		t.Run(profile, func(t *testing.T) {
			t.Parallel()
			operatorKit(t, profile)
		})
	}
}

func operatorKit(t *testing.T, profile string) {
	promBin := need(t, "prometheus")
	promtool := need(t, "promtool")
	chromium := need(t, "chromium", "chromium-browser")
	root := repoRoot(t)
	dir := t.TempDir()

	sim := kitPlatform(t, profile)
	webAddr := kitExporter(t, dir, sim)
	kitOperations(t, sim)
	kitMetrics(t, webAddr, promtool, sim.Token)

	proms := startPrometheus(t, promBin, root, dir, webAddr)
	waitSamples(t, proms)

	// Each server stores the histograms as its mode says: the proof that the other mode's
	// queries were not what answered.
	t.Run("histograms stored per mode", func(t *testing.T) { histogramsPerMode(t, proms) })

	for _, p := range proms {
		promURL := p.url
		t.Run(p.mode+"/rules load", func(t *testing.T) { rulesLoad(t, promURL) })
		t.Run(p.mode+"/every dashboard query returns data", func(t *testing.T) { dashboardQueries(t, promURL, webAddr) })
	}

	shot := "status-page.png"
	if profile != veiltest.ProfileDefault {
		shot = "status-page-" + profile + ".png"
	}
	t.Run("status page in a browser", func(t *testing.T) { statusPageInABrowser(t, chromium, root, dir, webAddr, sim.Token, shot) })
}

// kitPlatform is the simulator of the operator kit.
func kitPlatform(t *testing.T, profile string) *veiltest.Server {
	// The platform: a small inventory with events and guest agents, and a fault now and then
	// on one endpoint so the error panels have data too.
	sim := veiltest.New(veiltest.Options{Seed: 7, Nodes: 4, Clusters: 2, Datapools: 3, VMs: 40,
		InitialEvents: 30, EventRate: 5, TaskDuration: 200 * time.Millisecond, TaskFailureRate: 0.3,
		GuestCommandsWindows: true, Profile: profile})
	t.Cleanup(sim.Close)
	sim.SetFaults(veiltest.Fault{Path: "/api/clusters/*", Kind: "status", Status: 503, Rate: 0.2})
	// A node in service mode and a guest agent that stopped answering: the "not ACTIVE" and
	// "failing agents" panels and alerts must have something to show.
	if err := sim.SetNodeStatus(sim.NodeIDs()[0], "SERVICE"); err != nil {
		t.Fatal(err)
	}
	// (From the end of the list: the first VMs are shut down below.)
	ids := sim.DomainIDs()
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		if d, _ := sim.Domain(id); d.PowerState == 3 && d.AgentActive && d.Linux && !d.Template {
			if err := sim.SetGuestHang(id, true); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	return sim
}

// kitExporter starts the exporter against sim, with the event forwarder on an embedded NATS
// server, and returns its web address once it is ready.
func kitExporter(t *testing.T, dir string, sim *veiltest.Server) string {
	exporter := testutil.Build(t, "cmd/veil-exporter")

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(sim.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	webAddr, natsAddr := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`controllers:
  - name: e2e
    url: %s
    token_file: %s
    max_requests_per_second: 200
collect: {interval: 1s}
guest: {ping_interval: 1s, osinfo_interval: 2s, fsinfo_interval: 1s, time_interval: 1s, command_timeout: 1s}
events:
  poll_interval: 500ms
  start: earliest
  checkpoint: {store: file, dir: %s}
nats:
  url: nats://%s
  embedded: {enabled: true, listen: %s, store_dir: %s}
`, sim.URL, tokenFile, dir, natsAddr, natsAddr, filepath.Join(dir, "nats"))
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, dir, exporter, "--config.file", cfgFile, "--web.listen-address", webAddr, "--log.level", "debug")
	testutil.WaitHTTP(t, "http://"+webAddr+"/-/ready", 30*time.Second)
	return webAddr
}

// kitOperations shuts the first VMs down through the API.
func kitOperations(t *testing.T, sim *veiltest.Server) {
	// Operations that run as tasks (some fail) while the exporter watches, so the task panels
	// and the task alert have data.
	ops, err := veilops.New(sim.URL, sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range sim.DomainIDs()[:8] {
		if _, err := ops.ShutdownDomain(ctx, id, true); err != nil {
			t.Logf("shutdown %s: %v", id, err)
		}
	}
}

// kitMetrics waits for every contract family on /metrics, then checks the exposition with
// promtool and for the token.
func kitMetrics(t *testing.T, webAddr, promtool, token string) {
	// Every family the README lists (Metrics) is exported once the loops have run.
	var metrics []byte
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		metrics = get(t, "http://"+webAddr+"/metrics")
		if missing := missingFamilies(metrics); len(missing) > 0 {
			return fmt.Errorf("missing %v", missing)
		}
		return nil
	}, "every contract family on /metrics")

	// promtool check metrics: the exposition follows Prometheus' naming and unit conventions.
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(metrics)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	if bytes.Contains(metrics, []byte(token)) {
		t.Error("/metrics contains the controller token")
	}
}

// promServer is a Prometheus server of the operator kit: its histogram mode and its URL.
type promServer struct{ mode, url string }

// startPrometheus starts the Prometheus servers scraping the exporter at webAddr.
func startPrometheus(t *testing.T, promBin, root, dir, webAddr string) []promServer {
	// Real Prometheus servers scraping the exporter and evaluating the shipped rules: one as by
	// default (it asks for OpenMetrics first) and one with native histograms on (it asks for
	// protobuf first and keeps a histogram exposed with both kinds of buckets only as a native
	// one). The dashboards and the rules must answer in both.
	var proms []promServer
	for _, mode := range []string{"classic", "native histograms"} {
		promAddr := freeAddr(t)
		promCfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: veil-exporter
    static_configs: [{targets: [%q]}]
`, filepath.Join(root, "deploy/prometheus/veil-exporter.rules.yml"), webAddr)
		pdir := filepath.Join(dir, strings.ReplaceAll(mode, " ", "-"))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		promCfgFile := filepath.Join(pdir, "prometheus.yml")
		if err := os.WriteFile(promCfgFile, []byte(promCfg), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config.file=" + promCfgFile, "--storage.tsdb.path=" + filepath.Join(pdir, "tsdb"), "--web.listen-address=" + promAddr}
		if mode == "native histograms" {
			args = append(args, "--enable-feature=native-histograms")
		}
		start(t, pdir, promBin, args...)
		proms = append(proms, promServer{mode, "http://" + promAddr})
	}
	return proms
}

// waitSamples waits until each server is ready and holds enough samples for rate() over the
// dashboards' windows.
func waitSamples(t *testing.T, proms []promServer) {
	for _, p := range proms {
		testutil.WaitHTTP(t, p.url+"/-/ready", 30*time.Second)
	}
	for _, p := range proms {
		testutil.Eventually(t, 60*time.Second, func() bool {
			r, err := promQuery(p.url, `count_over_time(veil_up[1m]) >= 8`)
			return err == nil && len(r.Data.Result) > 0
		}, "8 veil_up samples in Prometheus (%s)", p.mode)
	}
}

// histogramsPerMode: each server stores the histograms as its mode says, and every scrape parsed.
func histogramsPerMode(t *testing.T, proms []promServer) {
	for _, p := range proms {
		// Every scrape parsed: OpenMetrics (classic) and protobuf (native) from rendered bytes. A
		// scrape that failed sooner than its timeout (1 s, the interval) was refused or did not
		// parse; one that took the timeout is the race detector's slowness, not the format's.
		failed := `sum_over_time(((up{job="veil-exporter"} == bool 0) * (scrape_duration_seconds{job="veil-exporter"} < bool 0.9))[1m:1s])`
		if r, err := promQuery(p.url, failed+` == 0`); err != nil || len(r.Data.Result) != 1 {
			t.Errorf("%s: a scrape of the exporter failed sooner than its timeout in the last minute (%v)", p.mode, err)
		}
		classic, err := promQuery(p.url, `veil_api_request_duration_seconds_bucket`)
		if err != nil {
			t.Fatal(err)
		}
		native, err := promQuery(p.url, `veil_api_request_duration_seconds`)
		if err != nil {
			t.Fatal(err)
		}
		wantNative := p.mode == "native histograms"
		if (len(native.Data.Result) > 0) != wantNative || (len(classic.Data.Result) > 0) == wantNative {
			t.Errorf("%s: %d native and %d classic bucket series of veil_api_request_duration_seconds", p.mode, len(native.Data.Result), len(classic.Data.Result))
		}
	}
}

// rulesLoad: the server loaded the shipped rules, all healthy.
func rulesLoad(t *testing.T, promURL string) {
	var rules struct {
		Status string `json:"status"`
		Data   struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, promURL+"/api/v1/rules"), &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" || r.LastError != "" {
				t.Errorf("rule %s/%s: health %s: %s", g.Name, r.Name, r.Health, r.LastError)
			}
		}
	}
	if n == 0 {
		t.Fatal("Prometheus loaded no rules")
	}
}

// dashboardQueries: every query of the shipped dashboards returns data. A query over a rate
// or a histogram needs a few scrapes to have any, which a loaded machine takes longer to make:
// the queries without data are asked again until they have some or a minute has passed.
func dashboardQueries(t *testing.T, promURL, webAddr string) {
	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	files := make([]string, 0, len(queries))
	for f := range queries {
		files = append(files, f)
	}
	sort.Strings(files)
	type query struct{ file, q string }
	var pending []query
	for _, f := range files {
		for _, q := range queries[f] {
			pending = append(pending, query{f, q})
		}
	}
	if len(pending) == 0 {
		t.Fatal("the dashboards hold no queries")
	}
	failed := map[query]error{}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		var still []query
		for _, q := range pending {
			r, err := promQuery(promURL, q.q)
			switch {
			case err != nil:
				failed[q] = err
			case len(r.Data.Result) == 0:
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for q, err := range failed {
		t.Errorf("%s: %q: %v", q.file, q.q, err)
	}
	for _, q := range pending {
		t.Errorf("%s: %q returned no data within a minute", q.file, q.q)
	}
	if len(pending) > 0 && os.Getenv("E2E_DEBUG") != "" {
		for _, l := range strings.Split(string(get(t, "http://"+webAddr+"/metrics")), "\n") {
			if strings.HasPrefix(l, "veil_guest_ping_success") || strings.HasPrefix(l, "veil_guest_command_errors") {
				t.Log(l)
			}
		}
	}
}

// statusPageInABrowser: the status page as chromium renders it shows every section and no
// token; its screenshot is left in bin/e2e under the name name.
func statusPageInABrowser(t *testing.T, chromium, root, dir, webAddr, token, name string) {
	out := filepath.Join(root, "bin", "e2e")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, name)
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "chromium"), "--window-size=1280,1800"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dom, err := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", "http://"+webAddr+"/")...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	page := string(dom)
	for _, want := range []string{"e2e", "Inventory", "Nodes", "VMs", "Guest checks", "Event position", "Recent events"} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if strings.Contains(page, token) {
		t.Error("status page shows the token")
	}
	if out, err := exec.CommandContext(ctx, chromium, append(args, "--screenshot="+shot, "http://"+webAddr+"/")...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}

// contractFamilies are the metric families the README promises (histograms by their base name).
var contractFamilies = []string{
	"veil_up", "veil_collector_success", "veil_collector_duration_seconds",
	"veil_collector_last_success_timestamp_seconds", "veil_api_requests_total",
	"veil_api_request_duration_seconds", "veil_exporter_build_info", "veil_controller_info",
	"veil_node_info", "veil_node_status", "veil_node_cpus", "veil_node_memory_bytes",
	"veil_node_cpu_usage_ratio", "veil_node_memory_usage_ratio", "veil_node_domains", "veil_node_domains_running",
	"veil_cluster_info", "veil_cluster_status", "veil_cluster_cpus", "veil_cluster_memory_bytes", "veil_cluster_nodes",
	"veil_cluster_cpu_usage_ratio", "veil_cluster_memory_usage_ratio",
	"veil_datapool_info", "veil_datapool_status", "veil_datapool_size_bytes", "veil_datapool_used_bytes",
	"veil_datapool_free_bytes",
	"veil_domain_info", "veil_domain_status", "veil_domain_power_state", "veil_domain_cpus", "veil_domain_memory_bytes",
	"veil_domain_cpu_usage_ratio", "veil_domain_memory_usage_ratio", "veil_domain_guest_agent_connected",
	"veil_guest_ping_success", "veil_guest_ping_duration_seconds", "veil_guest_os_info",
	"veil_guest_filesystem_size_bytes", "veil_guest_filesystem_used_bytes", "veil_guest_clock_offset_seconds",
	"veil_guest_command_errors_total",
	"veil_tasks", "veil_tasks_finished_total", "veil_task_duration_seconds",
	"veil_events_published_total", "veil_events_publish_errors_total", "veil_events_duplicates_total",
	"veil_events_gaps_total", "veil_events_last_published_timestamp_seconds", "veil_events_backlog",
	"veil_events_gap_episodes_total", "veil_nats_connected",
	"veil_domain_guest_info", "veil_domain_last_backup_timestamp_seconds", "veil_domain_last_backup_success",
	"veil_guest_network_receive_bytes_total", "veil_guest_network_transmit_bytes_total",
	"veil_guest_network_receive_packets_total", "veil_guest_network_transmit_packets_total",
	"veil_guest_network_receive_errors_total", "veil_guest_network_transmit_errors_total",
	"veil_guest_network_receive_drop_total", "veil_guest_network_transmit_drop_total",
}

func missingFamilies(exposition []byte) []string {
	have := map[string]bool{}
	for _, line := range strings.Split(string(exposition), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			have[strings.Fields(f)[0]] = true
		}
	}
	var missing []string
	for _, f := range contractFamilies {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	// Every collector of the contract reports its success, events included.
	for _, c := range []string{"nodes", "clusters", "datapools", "domains", "tasks", "vdisks", "interfaces", "version", "guest", "events"} {
		if !strings.Contains(string(exposition), `veil_collector_success{collector="`+c+`"`) {
			missing = append(missing, "veil_collector_success{collector="+c+"}")
		}
	}
	return missing
}
