package veil_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// newSim starts a simulator closed with the test.
func newSim(t testing.TB, o veiltest.Options) *veiltest.Server {
	t.Helper()
	s := veiltest.New(o)
	t.Cleanup(s.Close)
	return s
}

// newClient returns a client of sim with fast retries; mod may change the config.
func newClient(t testing.TB, sim *veiltest.Server, mod func(*veil.Config)) *veil.Client {
	t.Helper()
	cfg := veil.Config{URL: sim.URL, Token: sim.Token, RetryBaseDelay: time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := veil.New(cfg)
	if err != nil {
		t.Fatalf("veil.New: %v", err)
	}
	return c
}

// requestsTo filters the simulator's log by method and path prefix.
func requestsTo(sim *veiltest.Server, method, prefix string) []veiltest.Request {
	var out []veiltest.Request
	for _, r := range sim.Requests() {
		if r.Method == method && strings.HasPrefix(r.Path, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// findDomain returns a VM matching ok.
func findDomain(t testing.TB, sim *veiltest.Server, ok func(veiltest.DomainInfo) bool) veiltest.DomainInfo {
	t.Helper()
	for _, id := range sim.DomainIDs() {
		if d, found := sim.Domain(id); found && ok(d) {
			return d
		}
	}
	t.Fatal("no domain matches")
	return veiltest.DomainInfo{}
}

func guestReady(d veiltest.DomainInfo) bool {
	return d.Linux && d.AgentActive && !d.Template && d.PowerState == veil.PowerOn
}

func TestNewValidatesConfig(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  veil.Config
		want string
	}{
		{"bad scheme", veil.Config{URL: "ftp://x", Token: "t"}, "bad URL"},
		{"no host", veil.Config{URL: "http://", Token: "t"}, "bad URL"},
		{"no token", veil.Config{URL: "http://x"}, "no token"},
		{"missing token file", veil.Config{URL: "http://x", TokenFile: filepath.Join(dir, "nope")}, "token file"},
		{"empty token file", veil.Config{URL: "http://x", TokenFile: empty}, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := veil.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want error containing %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestEveryReadEndpointDecodes(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 1, Nodes: 4, VMs: 30, InitialEvents: 30, StringPercentNodes: 1})
	var mu sync.Mutex
	seen := map[string]int{}
	c := newClient(t, sim, func(cfg *veil.Config) {
		cfg.Observer = func(endpoint string, code int, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if d <= 0 {
				t.Errorf("observer got duration %v", d)
			}
			seen[endpoint]++
		}
	})
	ctx := context.Background()

	readInfrastructure(t, ctx, c)
	domains, err := c.Domains(ctx, nil)
	if err != nil || len(domains) != 30 {
		t.Fatalf("Domains = %d, %v", len(domains), err)
	}
	want := findDomain(t, sim, guestReady)
	d, err := c.Domain(ctx, want.ID)
	if err != nil || d.VerboseName != want.Name || d.Node.ID != want.NodeID || !d.GuestUtils.QemuState ||
		d.UserPowerState != veil.PowerOn || d.Cluster.ID == "" {
		t.Fatalf("Domain = %+v, %v; want %+v", d, err, want)
	}
	filtered, err := c.Domains(ctx, veil.Query{"name": {want.Name}})
	if err != nil || !slices.ContainsFunc(filtered, func(x veil.Domain) bool { return x.ID == want.ID }) {
		t.Fatalf("Domains(name=%s) = %v, %v", want.Name, filtered, err)
	}
	readJournals(t, ctx, c)
	if v, err := c.ControllerVersion(ctx); err != nil || v != veiltest.DefaultControllerVersion {
		t.Fatalf("ControllerVersion = %q, %v; want %s", v, err, veiltest.DefaultControllerVersion)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, ep := range []string{"/api/controllers/base-version/", "/api/nodes/", "/api/nodes/{id}/", "/api/clusters/", "/api/clusters/{id}/",
		"/api/data-pools/", "/api/data-pools/{id}/", "/api/domains/", "/api/domains/{id}/", "/api/tasks/",
		"/api/tasks/{id}/", "/api/events/", "/api/events/{id}/"} {
		if seen[ep] == 0 {
			t.Errorf("observer never saw endpoint %s (saw %v)", ep, seen)
		}
	}
}

// readJournals reads tasks and events, as collections and details.
func readJournals(t *testing.T, ctx context.Context, c *veil.Client) {
	t.Helper()
	tasks, err := c.Tasks(ctx, nil)
	if err != nil || len(tasks) == 0 {
		t.Fatalf("Tasks = %v, %v", tasks, err)
	}
	task, err := c.Task(ctx, tasks[0].ID)
	if err != nil || task.ID != tasks[0].ID || task.Created.IsZero() {
		t.Fatalf("Task = %+v, %v", task, err)
	}
	page, err := c.EventsPage(ctx, 0, 10, "-created")
	if err != nil || page.Count != 30 || len(page.Results) != 10 {
		t.Fatalf("EventsPage = %d/%d, %v", len(page.Results), page.Count, err)
	}
	ev, err := c.Event(ctx, page.Results[0].ID)
	if err != nil || ev.ID != page.Results[0].ID || string(ev.Raw) != string(page.Results[0].Raw) {
		t.Fatalf("Event = %+v, %v; want the same bytes as in the page", ev, err)
	}
}

// readInfrastructure reads nodes, clusters and data pools, as collections and details.
func readInfrastructure(t *testing.T, ctx context.Context, c *veil.Client) {
	t.Helper()
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 4 {
		t.Fatalf("Nodes = %d, %v; want 4", len(nodes), err)
	}
	for _, n := range nodes {
		// StringPercentNodes: 1 sends the percentages as strings; they must still be numbers.
		if n.ID == "" || n.Cluster.ID == "" || n.CPUUsedPercentUser == nil || *n.CPUUsedPercentUser <= 0 {
			t.Errorf("node decoded badly: %+v", n)
		}
	}
	node, err := c.Node(ctx, nodes[0].ID)
	if err != nil || node.ID != nodes[0].ID || node.Cluster.ID != nodes[0].Cluster.ID || node.Version == "" {
		t.Fatalf("Node = %+v, %v", node, err)
	}
	clusters, err := c.Clusters(ctx)
	if err != nil || len(clusters) != 1 {
		t.Fatalf("Clusters = %v, %v", clusters, err)
	}
	if cl, err := c.Cluster(ctx, clusters[0].ID); err != nil || cl.VerboseName != clusters[0].VerboseName {
		t.Fatalf("Cluster = %+v, %v", cl, err)
	}
	pools, err := c.Datapools(ctx)
	if err != nil || len(pools) != 2 || pools[0].Size <= 0 {
		t.Fatalf("Datapools = %+v, %v", pools, err)
	}
	if p, err := c.Datapool(ctx, pools[1].ID); err != nil || p.ID != pools[1].ID {
		t.Fatalf("Datapool = %+v, %v", p, err)
	}
}

// TestControllerVersion: the version the controller reports, a new one after an upgrade, and
// ErrNotFound from a controller older than the endpoint.
func TestControllerVersion(t *testing.T) {
	ctx := context.Background()
	sim := newSim(t, veiltest.Options{ControllerVersion: "6.5.2"})
	c := newClient(t, sim, nil)
	if v, err := c.ControllerVersion(ctx); err != nil || v != "6.5.2" {
		t.Fatalf("ControllerVersion = %q, %v; want 6.5.2", v, err)
	}
	sim.SetControllerVersion("6.5.3")
	if v, err := c.ControllerVersion(ctx); err != nil || v != "6.5.3" {
		t.Fatalf("after the upgrade ControllerVersion = %q, %v; want 6.5.3", v, err)
	}
	old := newSim(t, veiltest.Options{ControllerVersion: veiltest.NoControllerVersion})
	v, err := newClient(t, old, nil).ControllerVersion(ctx)
	if !errors.Is(err, veil.ErrNotFound) || v != "" {
		t.Fatalf("an older controller: ControllerVersion = %q, %v; want ErrNotFound", v, err)
	}
}

func TestEventRawIsTheExactBytesServed(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 2, InitialEvents: 250})
	c := newClient(t, sim, nil)
	n := 0
	for ev, err := range veil.List[veil.Event](context.Background(), c, "/api/events/", nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(ev.Raw, &fields); err != nil {
			t.Fatalf("Raw is not an object: %v", err)
		}
		// Fields the typed struct does not hold are still in Raw, to be forwarded.
		for _, k := range []string{"detail_message", "readed", "entities", "created"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("Raw lacks %q: %s", k, ev.Raw)
			}
		}
		if ev.Created.IsZero() || ev.ID == "" || ev.Type == "" {
			t.Errorf("event decoded badly: %+v", ev)
		}
	}
	if n != 250 {
		t.Fatalf("listed %d events, want 250", n)
	}
}
