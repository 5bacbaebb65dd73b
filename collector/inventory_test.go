package collector

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// Names of the store's collections, as in the collector label of their run status.
const (
	collNodes, collClusters, collDatapools, collDomains = "nodes", "clusters", "datapools", "domains"
	collTasks, collVersion, collVdisks, collInterfaces  = "tasks", "version", "vdisks", "interfaces"
	collDetails                                         = "device_details"
	// unavailableRetryEvery is the store's: a collection it lacks is asked again at every this
	// many refreshes.
	unavailableRetryEvery = 10
)

func testCollect() config.Collect {
	c := config.Default().Collect
	c.Interval = 30 * time.Second
	return c
}

type fixture struct {
	sim    *veiltest.Server
	client *veil.Client
	inv    testInventory
	api    *APIMetrics
	logs   *tu.SyncBuffer
	render sync.Once // starts the view's Run (rendered)
}

// rendered starts the view's render loop (once, until the test ends) and returns the Set that
// shows the store's latest snapshot, once rendered.
func (f *fixture) rendered(t *testing.T) *exposition.Set {
	t.Helper()
	f.render.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); f.inv.Inventory.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	})
	want := f.inv.Snapshot().Gen
	tu.Eventually(t, 10*time.Second, func() bool { return f.inv.shown().Gen >= want }, "the latest snapshot rendered")
	return f.inv.Rendered()
}

// newTestInventory is a store of client's controller named "test" and its view.
func newTestInventory(client *veil.Client, cc config.Collect, logger log.Logger) (testInventory, error) {
	store, err := inventory.NewStore("test", client, cc, logger)
	if err != nil {
		return testInventory{}, err
	}
	return testInventory{store, NewInventory(store, nil)}, nil
}

// containsWord reports whether s contains name as a whole word, ignoring case.
func containsWord(s, name string) bool {
	return regexp.MustCompile(`(?i)(^|[^\p{L}\p{N}_])` + regexp.QuoteMeta(name) + `($|[^\p{L}\p{N}_])`).MatchString(s)
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testInventory is a store and its metric view: the store's methods, and the view's as a
// prometheus.Collector (live, from the latest snapshot).
type testInventory struct {
	*inventory.Store
	*Inventory
}

// Run runs the store and renders its snapshots until ctx is done.
func (i testInventory) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); i.Inventory.Run(ctx) }()
	i.Store.Run(ctx)
	<-done
}

// Ready says the view rendered the store's first refresh.
func (i testInventory) Ready() bool { return i.Inventory.Ready() }

// problems is what the status page lists of the latest snapshot.
func (i testInventory) problems() []inventory.Problem { return i.Snapshot().Problems(time.Now()) }

// newFixture starts a simulator and an inventory against it. The client does not retry, so a
// fault shows in one refresh.
func newFixture(t *testing.T, opts veiltest.Options, cc config.Collect, vc veil.Config) *fixture {
	t.Helper()
	sim := veiltest.New(opts)
	t.Cleanup(sim.Close)
	f := &fixture{sim: sim, logs: &tu.SyncBuffer{}}
	f.api = NewAPIMetrics("test", log.NewLogfmtLogger(f.logs))
	vc.URL = sim.URL
	if vc.TokenFile == "" && vc.Token == "" {
		vc.Token = sim.Token
	}
	vc.MaxRetries = -1
	vc.Observer, vc.Rejected = f.api.Observe, f.api.Rejected
	client, err := veil.New(vc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := inventory.NewStore("test", client, cc, log.NewLogfmtLogger(f.logs))
	if err != nil {
		t.Fatal(err)
	}
	f.client, f.inv = client, testInventory{store, NewInventory(store, nil)}
	return f
}

func (f *fixture) refresh(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return f.inv.Refresh(ctx)
}

func (f *fixture) mustRefresh(t *testing.T) {
	t.Helper()
	if err := f.refresh(t); err != nil {
		t.Fatalf("refresh: %v", err)
	}
}

// series returns the exposition lines of the inventory whose text contains every substring.
func series(t *testing.T, c prometheus.Collector, subs ...string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		writeText(&buf, mf)
	}
	var out []string
next:
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

func value(t *testing.T, c prometheus.Collector, subs ...string) string {
	t.Helper()
	s := series(t, c, subs...)
	if len(s) != 1 {
		t.Fatalf("want one series matching %q, got %d: %q", subs, len(s), s)
	}
	return s[0][strings.LastIndexByte(s[0], ' ')+1:]
}

var smallInventory = veiltest.Options{Seed: 7, Nodes: 2, Clusters: 1, Datapools: 2, VMs: 3, Templates: -1, InitialTasks: 4, StringPercentNodes: 0.5}

// goldenFamilies are compared with testdata/inventory.prom; the timing families change on
// every run and are checked separately.
var goldenFamilies = []string{
	"veil_up",
	"veil_node_info", "veil_node_status", "veil_node_cpus", "veil_node_memory_bytes",
	"veil_node_cpu_usage_ratio", "veil_node_memory_usage_ratio", "veil_node_domains", "veil_node_domains_running",
	"veil_cluster_info", "veil_cluster_status", "veil_cluster_cpus", "veil_cluster_memory_bytes", "veil_cluster_nodes",
	"veil_cluster_cpu_usage_ratio", "veil_cluster_memory_usage_ratio",
	"veil_datapool_info", "veil_datapool_status", "veil_datapool_size_bytes", "veil_datapool_used_bytes", "veil_datapool_free_bytes",
	"veil_domain_info", "veil_domain_status", "veil_domain_power_state", "veil_domain_cpus", "veil_domain_memory_bytes",
	"veil_domain_cpu_usage_ratio", "veil_domain_memory_usage_ratio", "veil_domain_guest_agent_connected",
	"veil_domain_guest_info", "veil_tasks",
}

// TestExpositionMatchesGolden compares the metrics of a small seeded inventory with
// testdata/inventory.prom. The file was generated once (UPDATE_GOLDEN=1) and then checked by
// hand against the simulator's JSON for this seed (GET /api/nodes/, /api/clusters/,
// /api/data-pools/, /api/domains/, /api/tasks/?status=X): ids, names, MiB * 1048576 and
// percent / 100.
func TestExpositionMatchesGolden(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	golden := filepath.Join("testdata", "inventory.prom")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		var buf bytes.Buffer
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(f.inv)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		keep := map[string]bool{}
		for _, n := range goldenFamilies {
			keep[n] = true
		}
		for _, mf := range mfs {
			if keep[mf.GetName()] {
				writeText(&buf, mf)
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exp, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	if err := testutil.CollectAndCompare(f.inv, exp, goldenFamilies...); err != nil {
		t.Error(err)
	}
	for _, name := range []string{collNodes, collClusters, collDatapools, collDomains, collTasks, collVersion} {
		if r := runOf(t, f.inv, name); !r.Success || r.LastSuccess.IsZero() || r.Unavailable || r.Error != "" {
			t.Errorf("collector %s: run %+v, want a success with its time", name, r)
		}
	}
	// The daemon emits veil_collector_* from RunStatus: the inventory must not emit them too.
	if s := series(t, f.inv, "veil_collector_"); len(s) != 0 {
		t.Errorf("inventory emits veil_collector_* itself: %q", s)
	}
}

// TestLintFindsNoProblem runs promlint over every family, including the task counters and
// histogram which only appear once tasks were seen finishing.
func TestLintFindsNoProblem(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 3, VMs: 5, TaskDuration: 10 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	startAndWait(t, f, f.sim.DomainIDs()[0])
	f.mustRefresh(t)
	if len(series(t, f.inv, "veil_task_duration_seconds_bucket")) == 0 {
		t.Fatal("no task histogram to lint")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.inv, f.api)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// startAndWait runs one task on the platform (a shutdown or a start) and waits for its end.
func startAndWait(t *testing.T, f *fixture, vmID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := veilops.New(f.sim.URL, f.sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.ShutdownDomain(ctx, vmID, true)
	if err != nil {
		env, err = c.StartDomain(ctx, vmID, false)
	}
	if err != nil {
		t.Fatalf("couldn't run a task: %v", err)
	}
	if _, err := c.WaitTask(ctx, env.Task.ID, 10*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDeletedVMDisappears(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	victim := f.sim.DomainIDs()[1]
	if n := len(series(t, f.inv, `domain_id="`+victim+`"`)); n == 0 {
		t.Fatal("the VM has no series before it is deleted")
	}
	if err := f.sim.DeleteVM(victim); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	if s := series(t, f.inv, `domain_id="`+victim+`"`); len(s) != 0 {
		t.Errorf("deleted VM still exported: %q", s)
	}
	if got := f.inv.Status().Domains; got != 2 {
		t.Errorf("status counts %d domains, want 2", got)
	}
}

func TestMigratedVMIsNotDuplicated(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	vm := f.sim.DomainIDs()[0]
	info := series(t, f.inv, "veil_domain_info", `domain_id="`+vm+`"`)
	if len(info) != 1 {
		t.Fatalf("info before migration: %q", info)
	}
	var target string
	for _, n := range f.sim.NodeIDs() {
		if !strings.Contains(info[0], `node_id="`+n+`"`) {
			target = n
		}
	}
	if err := f.sim.MigrateVM(vm, target); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	info = series(t, f.inv, "veil_domain_info", `domain_id="`+vm+`"`)
	if len(info) != 1 || !strings.Contains(info[0], `node_id="`+target+`"`) {
		t.Errorf("after migration want one info series on node %s, got %q", target, info)
	}
}

func TestDomainFilters(t *testing.T) {
	cc := testCollect()
	f := newFixture(t, veiltest.Options{Seed: 6, VMs: 20}, cc, veil.Config{})
	f.mustRefresh(t)
	all := f.inv.Domains()
	if len(all) != 20 {
		t.Fatalf("unfiltered: %d domains", len(all))
	}
	name := all[0].VerboseName
	cc.DomainInclude = config.MustRegexp("^" + regexpQuote(name) + "$")
	g := newFixture(t, veiltest.Options{Seed: 6, VMs: 20}, cc, veil.Config{})
	g.mustRefresh(t)
	if d := g.inv.Domains(); len(d) != 1 || d[0].VerboseName != name {
		t.Errorf("include %q kept %d domains", cc.DomainInclude, len(d))
	}
	cc.DomainInclude, cc.DomainExclude = config.Regexp{}, config.MustRegexp("^"+regexpQuote(name)+"$")
	h := newFixture(t, veiltest.Options{Seed: 6, VMs: 20}, cc, veil.Config{})
	h.mustRefresh(t)
	if d := h.inv.Domains(); len(d) != 19 {
		t.Errorf("exclude kept %d domains, want 19", len(d))
	}
	if st := h.inv.Status(); st.DomainsTotal != 20 || st.Domains != 19 {
		t.Errorf("status counts %d of %d", st.Domains, st.DomainsTotal)
	}
}

// TestDisabledCollectionsAreNotRequested: only the enabled collections and the controller's
// version (always read: one small request) are asked for and reported.
func TestDisabledCollectionsAreNotRequested(t *testing.T) {
	cc := testCollect()
	cc.Domains, cc.Tasks, cc.Clusters, cc.Vdisks, cc.Interfaces = false, false, false, false, false
	f := newFixture(t, smallInventory, cc, veil.Config{})
	f.mustRefresh(t)
	for _, r := range f.sim.Requests() {
		if !strings.HasPrefix(r.Path, "/api/nodes") && !strings.HasPrefix(r.Path, "/api/data-pools") && r.Path != "/api/controllers/base-version/" {
			t.Errorf("disabled collection requested: %s", r.Path)
		}
	}
	for _, r := range f.inv.RunStatus() {
		if r.Collector != collNodes && r.Collector != collDatapools && r.Collector != collVersion {
			t.Errorf("disabled collector reported: %+v", r)
		}
	}
	if n := len(f.inv.RunStatus()); n != 3 {
		t.Errorf("%d runs reported, want nodes, datapools and version", n)
	}
}

func TestScrapeNeverCallsTheAPIAndIsRaceFree(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	f.sim.ResetRequests()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				testutil.CollectAndCount(f.inv)
			}
		}()
	}
	_ = f.refresh(t) // concurrently with the scrapes
	wg.Wait()
	n := len(f.sim.Requests())
	f.sim.ResetRequests()
	testutil.CollectAndCount(f.inv)
	if m := len(f.sim.Requests()); m != 0 {
		t.Errorf("a scrape sent %d requests", m)
	}
	if n == 0 {
		t.Error("the refresh sent no request")
	}
}

func TestAPIMetricsCountRequestsByEndpoint(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	if v := value(t, f.api, "veil_api_requests_total", `endpoint="/api/domains/"`, `code="200"`); v == "0" {
		t.Errorf("domain requests not counted")
	}
	if s := series(t, f.api, "veil_api_request_duration_seconds_count", `endpoint="/api/nodes/"`); len(s) != 1 {
		t.Errorf("no duration for nodes: %q", s)
	}
}

// runOf is the run status of one collection.
func runOf(t *testing.T, inv runstatus.Reporter, name string) runstatus.Status {
	t.Helper()
	for _, r := range inv.RunStatus() {
		if r.Collector == name {
			return r
		}
	}
	t.Fatalf("no run status for %s in %+v", name, inv.RunStatus())
	return runstatus.Status{}
}

func writeText(buf *bytes.Buffer, mf *dto.MetricFamily) {
	if _, err := expfmt.MetricFamilyToText(buf, mf); err != nil {
		panic(err)
	}
}

func fmtSscan(s string, v *float64) (int, error) { return fmt.Sscan(s, v) }

func regexpQuote(s string) string { return regexp.QuoteMeta(s) }

// TestHelpSaysDataIsCached: the families a scrape serves from a background run say how often
// that run happens, by the setting that says it, so nobody reads them as live values; the
// texts are the same whatever the settings.
func TestHelpSaysDataIsCached(t *testing.T) {
	helps := func(interval time.Duration) (*Inventory, map[string]string) {
		cc := testCollect()
		cc.Interval = interval
		store, err := inventory.NewStore("test", &veil.Client{}, cc, nil)
		if err != nil {
			t.Fatal(err)
		}
		inv := NewInventory(store, nil)
		out := map[string]string{}
		ch := make(chan *prometheus.Desc, 100)
		inv.Describe(ch)
		close(ch)
		for d := range ch {
			out[d.String()[:strings.Index(d.String(), ", help:")]] = d.String()
		}
		return inv, out
	}
	inv, a := helps(45 * time.Second)
	if _, b := helps(time.Hour); !maps.Equal(a, b) {
		t.Errorf("HELP texts change with collect.interval:\n%v\n%v", a, b)
	}
	tests := []struct {
		family string
		desc   *prometheus.Desc
		want   []string
	}{
		{"veil_up", inv.fams.up.Prom, []string{"every collect.interval", "last good data"}},
		{"veil_controller_info", inv.fams.controllerInfo.Prom, []string{"Cached", "every 10th refresh (10 × collect.interval)", "404"}},
		{"veil_domain_info", inv.fams.domains[0].desc.Prom, []string{"every collect.interval", "last good data is kept while the controller fails"}},
		{"veil_tasks_finished_total", inv.tasks.finishedDesc, []string{"counted at each inventory refresh, every collect.interval"}},
		{"veil_task_duration_seconds", describe(inv.tasks.durations), []string{"counted at each inventory refresh, every collect.interval"}},
		{"veil_domain_guest_info", inv.fams.domains[8].desc.Prom, []string{"every collect.interval"}},
		{"veil_domain_last_backup_timestamp_seconds", inv.fams.backups[0].desc.Prom, []string{"Cached", "every collect.interval", "backup_lookback"}},
		{"veil_domain_last_backup_success", inv.fams.backups[1].desc.Prom, []string{"Cached", "every collect.interval"}},
	}
	for _, tt := range tests {
		s := tt.desc.String()
		if !strings.Contains(s, `"`+tt.family+`"`) {
			t.Errorf("desc %s is not %s", s, tt.family)
		}
		for _, w := range tt.want {
			if !strings.Contains(s, w) {
				t.Errorf("%s HELP does not say %q: %s", tt.family, w, s)
			}
		}
	}
}

// describe is the one Desc c describes.
func describe(c prometheus.Collector) *prometheus.Desc {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return <-ch
}
