package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

var pageNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fullStatus has every part of the page filled in.
func fullStatus() statusData {
	return statusData{
		Version: "1.2.3", Started: pageNow.Add(-time.Hour), ConfigFile: "/etc/veil.yaml", LastReload: pageNow.Add(-time.Hour),
		NATS: &natsStatus{URL: "nats://127.0.0.1:4222", Connected: true, Embedded: true},
		Controllers: []controllerStatus{{
			Name: "prod", URL: "https://veil.example.com", State: "up",
			Inventory: inventoryStatus{
				LastRefresh: pageNow.Add(-3 * time.Second), RefreshDuration: seconds(200 * time.Millisecond),
				Nodes: 3, Clusters: 1, Datapools: 2, VMs: 37, VMsTotal: 40, Tasks: map[string]int{"SUCCESS": 16, "FAILED": 4},
			},
			Collectors: []collectorStatus{
				{Collector: "nodes", State: "ok", Success: true, Duration: seconds(20 * time.Millisecond), LastSuccess: pageNow.Add(-3 * time.Second)},
				{Collector: "tasks", State: "failing", Error: "couldn't get tasks: timeout"},
				{Collector: "datapools", State: "unavailable", Error: "the controller answered 404"},
			},
			Guest: &guestStatus{Eligible: 31, Checked: 29, SweepDuration: seconds(5 * time.Second), LastSweep: pageNow.Add(-10 * time.Second), LastError: "guest-ping on vm-1: timeout"},
			Events: &eventsStatus{
				Subject: "veil.events.prod.>", Order: "oldest_first", Position: pageNow.Add(-2 * time.Second), PositionIDs: []string{"ev-9a", "ev-9b"},
				Backlog: 4, Published: 117, LastPublished: pageNow.Add(-time.Second), Duplicates: 2, Gaps: 1, LastError: "publish timed out",
				Recent: []recentEvent{
					{Created: pageNow.Add(-2 * time.Second), Type: "error", Subject: "veil.events.prod.error.domain", ID: "ev-9b", Message: "Node node-03 is not responding"},
					{Created: pageNow.Add(-2 * time.Second), Type: "info", Subject: "veil.events.prod.info.node", ID: "ev-9a"},
				},
			},
		}},
	}
}

func render(t *testing.T, s statusData) string {
	t.Helper()
	var b bytes.Buffer
	if err := statusPage.Execute(&b, statusPageData{statusData: s, Now: pageNow}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestStatusPageRendering(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*statusData)
		want    []string
		notWant []string
	}{
		{
			name: "every table and row is labelled",
			want: []string{
				"<h2>NATS</h2>", "<caption>Inventory</caption>", "<caption>Collectors</caption>", "<caption>Guest checks</caption>",
				"<caption>Events</caption>", "<caption>Recent events</caption>",
				"<th>Nodes</th>", "<th>Clusters</th>", "<th>Datapools</th>", "<th>VMs (exported/total)</th>", "<th>Tasks by status</th>",
				"<th>Event position</th>", "<th>Order</th>", "<th>Backlog</th>", "<th>Published</th>", "<th>Last published</th>",
				"<th>Duplicates dropped</th>", "<th>Gaps</th>", "<th>Last error</th>", "<th>Subscribe to</th>",
			},
		},
		{
			name: "values are shown",
			want: []string{
				"37 / 40", "SUCCESS 16", "FAILED 4", "29 / 31 eligible VMs", "guest-ping on vm-1: timeout",
				"<br><code>ev-9a</code><br><code>ev-9b</code>", "oldest_first", ">117<", "publish timed out",
				"<code>veil.events.prod.&gt;</code>", "couldn&#39;t get tasks: timeout",
				"nats://127.0.0.1:4222", `<span class="badge ok">connected</span>`, "embedded in this process",
			},
		},
		{
			name: "recent events list created, type, message, subject and id",
			want: []string{
				`<span class="badge bad">error</span></td><td>Node node-03 is not responding</td><td><code>veil.events.prod.error.domain</code></td><td><code>ev-9b</code>`,
				`<span class="badge info">info</span></td><td><span class="dim">no message</span></td><td><code>veil.events.prod.info.node</code></td><td><code>ev-9a</code>`,
			},
		},
		{
			name: "what is wrong comes first, by name with the id on hover, failures in red, states not",
			edit: func(s *statusData) {
				s.Controllers[0].Problems = []problem{
					{Kind: "node", ID: "n-3", Name: "node-03", State: "FAILED", Failure: true},
					{Kind: "guest", ID: "d-7", Name: "web-07", State: "not answering guest-ping", Failure: true},
					{Kind: "node", ID: "n-5", Name: "node-05", State: "SERVICE"},
				}
				s.Controllers[0].ProblemsTotal = 30
			},
			want: []string{
				`<caption>What is wrong</caption>`,
				`<span class="badge bad">node</span></td><td><span title="n-3">node-03</span></td><td><span class="err">FAILED</span>`,
				`<span class="badge bad">guest</span></td><td><span title="d-7">web-07</span></td><td><span class="err">not answering guest-ping</span>`,
				`<span class="badge wait">node</span></td><td><span title="n-5">node-05</span></td><td>SERVICE</td>`,
				`and 27 more (30 in all`,
			},
		},
		{
			name: "the platform's version beside the controller",
			edit: func(s *statusData) { s.Controllers[0].Version = "6.1.3" },
			want: []string{`<span class="dim">version 6.1.3</span></h2>`},
		},
		{
			name:    "nothing wrong says so",
			want:    []string{`<caption>What is wrong</caption>`, `Nothing: every node and datapool is ACTIVE`},
			notWant: []string{`more (`},
		},
		{
			name: "failed tasks are red, successful green",
			want: []string{`<span class="badge bad">FAILED 4</span>`, `<span class="badge ok">SUCCESS 16</span>`},
		},
		{
			name: "a guest state is not an error, and the VM is named",
			edit: func(s *statusData) {
				g := s.Controllers[0].Guest
				g.LastErrorDomain, g.LastErrorDomainID, g.LastErrorCommand, g.LastErrorReason, g.LastIsState = "web-07", "d-7", "guest-ping", "agent_not_running", true
			},
			want:    []string{`<th>Last guest state</th><td><code>guest-ping</code> on <span title="d-7">web-07</span>: <span class="badge na">agent_not_running</span>`},
			notWant: []string{`<span class="err">agent_not_running</span>`},
		},
		{
			name: "a guest failure is red, and the VM is named",
			edit: func(s *statusData) {
				g := s.Controllers[0].Guest
				g.LastErrorDomain, g.LastErrorDomainID, g.LastErrorCommand, g.LastErrorReason = "web-07", "d-7", "guest-ping", "timeout"
			},
			want: []string{`<th>Last error</th><td><code>guest-ping</code> on <span title="d-7">web-07</span>: <span class="err">timeout</span>`},
		},
		{
			name: "times read as ago with the absolute time in the title",
			want: []string{
				`title="2026-03-04 05:06:04.000000 UTC">3s ago</time>`,
				`title="2026-03-04 05:05:57.000000 UTC">10s ago</time>, took 5s`,
				`title="2026-03-04 04:06:07.000000 UTC">1h00m ago</time>`,
			},
		},
		{
			name: "a controller that is up says so without an error line",
			want: []string{`<h2>prod <span class="badge ok">up</span>`}, notWant: []string{`<p class="err">`},
		},
		{
			name: "a controller that is down shows its error in red",
			edit: func(s *statusData) {
				s.Controllers[0].State, s.Controllers[0].Error = "down", "controller prod rejected the token"
			},
			want: []string{`<span class="badge bad">down</span>`, `<p class="err">controller prod rejected the token</p>`},
		},
		{
			name: "a controller before its first refresh is waiting",
			edit: func(s *statusData) { s.Controllers[0].State = "starting" },
			want: []string{`<span class="badge wait">waiting for the first refresh</span>`},
		},
		{
			name: "a disconnected NATS shows its error",
			edit: func(s *statusData) { s.NATS.Connected, s.NATS.LastError = false, "nats: no servers available" },
			want: []string{`<span class="badge bad">not connected</span>`, `<span class="err">nats: no servers available</span>`},
		},
		{
			name: "a NATS error from before the connection came back is shown as past, with its time",
			edit: func(s *statusData) {
				s.NATS.LastError, s.NATS.LastErrorAt = "dial tcp 127.0.0.1:4222: connect: connection refused", pageNow.Add(-90*time.Second)
			},
			want:    []string{`<span class="badge ok">connected</span>`, `<span class="dim">dial tcp 127.0.0.1:4222: connect: connection refused</span> · <time`, `>1m30s ago</time> <span class="dim">(connected since)</span>`},
			notWant: []string{`<span class="err">dial tcp`},
		},
		{
			name: "zero times read never",
			edit: func(s *statusData) {
				s.Controllers[0].Events.LastPublished = time.Time{}
				s.Controllers[0].Collectors[1].LastSuccess = time.Time{}
			},
			want: []string{`<th>Last published</th><td><span class="dim">never</span>`, `<td class="n">—</td><td><span class="dim">never</span>`},
		},
		{
			name: "collectors read ok, failing with the error in red, or not available neutrally",
			want: []string{
				`<td>nodes</td><td><span class="badge ok">ok</span>`,
				`<td>tasks</td><td><span class="badge bad">failing</span></td><td class="n">—</td><td><span class="dim">never</span></td><td><span class="err">couldn&#39;t get tasks: timeout</span>`,
				`<td>datapools</td><td><span class="badge na" title="the controller does not offer this collection; retried at a slower pace">not available</span></td><td class="n">—</td><td><span class="dim">never</span></td><td><span class="dim">the controller answered 404</span>`,
			},
			notWant: []string{`<span class="err">the controller answered 404`},
		},
		{
			name: "a stopped forwarder says another instance owns the position",
			edit: func(s *statusData) { s.Controllers[0].Events.Stopped = true },
			want: []string{"Stopped: another instance owns the position."},
		},
		{
			name: "disabled guest checks, events and NATS say so",
			edit: func(s *statusData) { s.NATS, s.Controllers[0].Guest, s.Controllers[0].Events = nil, nil, nil },
			want: []string{
				"Guest checks are disabled in the configuration.", "Event forwarding is disabled in the configuration.",
				"Event forwarding is disabled: no NATS connection.", "<caption>Guest checks</caption>", "<caption>Events</caption>",
			},
			notWant: []string{"<caption>Recent events</caption>"},
		},
		{
			name: "a refused reload is a banner",
			edit: func(s *statusData) { s.LastReloadError = "line 3: field bogus not found" },
			want: []string{`<div class="banner">Last reload refused, the previous configuration keeps running: line 3: field bogus not found</div>`},
		},
		{
			name: "text from the controller is escaped",
			edit: func(s *statusData) {
				s.Controllers[0].State, s.Controllers[0].Error = "down", "<script>alert(1)</script>"
				s.Controllers[0].Events.Recent[0].Type = `"><img src=x>`
			},
			want:    []string{"&lt;script&gt;alert(1)&lt;/script&gt;"},
			notWant: []string{"<script>", "<img"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fullStatus()
			if tt.edit != nil {
				tt.edit(&s)
			}
			page := render(t, s)
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %s", w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(page, w) {
					t.Errorf("page has %s", w)
				}
			}
			if t.Failed() {
				t.Logf("page:\n%s", page)
			}
		})
	}
}

func TestAgo(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"under a second is just now", 400 * time.Millisecond, "just now"},
		{"seconds", 3*time.Second + 900*time.Millisecond, "3s ago"},
		{"minutes keep seconds", 2*time.Minute + 5*time.Second, "2m05s ago"},
		{"hours keep minutes", 5*time.Hour + 7*time.Minute + 9*time.Second, "5h07m ago"},
		{"two days and more are days", 50 * time.Hour, "2d02h ago"},
		{"a time in the future is from now", -4 * time.Second, "4s from now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ago(pageNow, pageNow.Add(-tt.d)); got != tt.want {
				t.Errorf("ago(%s) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
	if got := ago(pageNow, time.Time{}); got != "never" {
		t.Errorf("ago(zero) = %q, want never", got)
	}
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestStatusJSONKeysAreSnakeCase walks every key of a fully filled status; task statuses are
// data (the platform's names), not keys of ours.
func TestStatusJSONKeysAreSnakeCase(t *testing.T) {
	b, err := json.Marshal(fullStatus())
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !snakeCase.MatchString(k) {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				seen[k] = true
				if k != "tasks" {
					walk(path+"."+k, e)
				}
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	walk("", v)
	for _, k := range []string{"controllers", "nats", "inventory", "collectors", "collector", "state", "guest", "events", "recent", "vms_total",
		"refresh_duration_seconds", "position_ids", "duplicates_dropped", "last_published", "subject", "created", "id"} {
		if !seen[k] {
			t.Errorf("no key %q in %s", k, b)
		}
	}
	var durations struct {
		Controllers []struct {
			Inventory struct {
				RefreshDuration float64 `json:"refresh_duration_seconds"`
			} `json:"inventory"`
		} `json:"controllers"`
	}
	if err := json.Unmarshal(b, &durations); err != nil || durations.Controllers[0].Inventory.RefreshDuration != 0.2 {
		t.Errorf("refresh_duration_seconds = %+v (%v), want 0.2 seconds", durations, err)
	}
}

// natsWithPassword runs a nats-server with JetStream that demands a user and password.
func natsWithPassword(t *testing.T, user, password string) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: user, Password: password, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestStatusPageWithEvents runs the daemon against the simulator and a password-protected
// NATS named in a server list: the page and its JSON show every section and the events just
// forwarded, and neither they, the metrics nor the logs (a disconnect included) hold the token
// or the NATS password.
func TestStatusPageWithEvents(t *testing.T) {
	const natsPassword = "n4ts-pa55word-xyz"
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 3, Token: testutil.SecretToken, VMs: 5, InitialEvents: 30, EventsOrder: "oldest_first"})
	defer sim.Close()
	natsSrv := natsWithPassword(t, "veil", natsPassword)
	// The list's first server is not there; the client moves on to the second.
	natsAddr := natsSrv.Addr().String()
	natsURL := fmt.Sprintf("nats://%s,nats://veil:%s@%s", freeAddr(t), natsPassword, natsAddr)
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\n" +
		"guest:\n  enabled: true\n  ping_interval: 1s\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: file, dir: %s}\n", dir) +
		fmt.Sprintf("nats:\n  url: %q\n", natsURL)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, cfgFile)
	d.waitReady(t)
	type recent struct{ ID, Subject, Message string }
	var st struct {
		NATS struct {
			URL       string `json:"url"`
			Connected bool   `json:"connected"`
		} `json:"nats"`
		Controllers []struct {
			State  string `json:"state"`
			Events struct {
				Published uint64   `json:"published"`
				Subject   string   `json:"subject"`
				Recent    []recent `json:"recent"`
			} `json:"events"`
			Guest struct {
				Eligible int `json:"eligible"`
			} `json:"guest"`
			Inventory struct {
				VMs  int `json:"vms"`
				Push struct {
					Mode string `json:"mode"`
				} `json:"push"`
				KV struct {
					Bucket string `json:"bucket"`
					Keys   int    `json:"keys"`
				} `json:"kv"`
			} `json:"inventory"`
		} `json:"controllers"`
	}
	var js string
	testutil.Eventually(t, 15*time.Second, func() bool {
		_, js = d.get(t, "/?format=json")
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, js)
		}
		return len(st.Controllers) == 1 && st.Controllers[0].Events.Published >= 30 &&
			st.Controllers[0].Inventory.Push.Mode == "push" && st.Controllers[0].Inventory.KV.Keys > st.Controllers[0].Inventory.VMs
	}, "30 events published, the push channel open and the inventory on NATS")
	if kv := st.Controllers[0].Inventory.KV; kv.Bucket != "VEIL_INVENTORY" {
		t.Errorf("inventory bucket %q", kv.Bucket)
	}
	c := st.Controllers[0]
	if c.State != "up" || !st.NATS.Connected || c.Events.Subject != "veil.events.alpha.>" || len(c.Events.Recent) == 0 {
		t.Errorf("json status: %s", js)
	}
	if want := "nats://xxxxx@" + natsAddr; !strings.HasPrefix(st.NATS.URL, "nats://") || !strings.HasSuffix(st.NATS.URL, want) || strings.Contains(st.NATS.URL, "veil@") {
		t.Errorf("nats url %q, want the list ending in %s", st.NATS.URL, want)
	}

	code, page := d.get(t, "/")
	if code != 200 {
		t.Fatalf("status page: %d", code)
	}
	for _, want := range []string{"<h2>NATS</h2>", "<caption>Inventory</caption>", "<caption>Collectors</caption>",
		"<caption>Guest checks</caption>", "<caption>Events</caption>", "<caption>Recent events</caption>",
		`<h2>alpha <span class="badge ok">up</span>`, "<code>veil.events.alpha.&gt;</code>", `<span class="badge ok">connected</span>`,
		"<td>domains</td>", "eligible VMs", `<th>Kept fresh by</th><td><span class="badge ok">push</span>`, "<code>VEIL_INVENTORY</code>", "<td>push</td>", "<td>inventory_kv</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %s", want)
		}
	}
	// The page was taken after the JSON: every event listed there is at least as old, so the
	// oldest few of the JSON's list are still on the page.
	for _, r := range c.Events.Recent[len(c.Events.Recent)/2:] {
		if !strings.Contains(page, "<code>"+r.ID+"</code>") || !strings.Contains(page, "<code>"+r.Subject+"</code>") {
			t.Errorf("recent event %s (%s) not on the page", r.ID, r.Subject)
		}
		if r.Message == "" || !strings.Contains(page, "<td>"+template.HTMLEscapeString(r.Message)+"</td>") {
			t.Errorf("recent event %s: message %q not on the page", r.ID, r.Message)
		}
	}

	_, metrics := d.get(t, "/metrics")
	// A lost server is logged with the URL list.
	natsSrv.Shutdown()
	testutil.Eventually(t, 15*time.Second, func() bool { return strings.Contains(d.logs.String(), "NATS disconnected") }, "the disconnect logged")
	if !strings.Contains(d.logs.String(), "xxxxx@"+natsAddr) {
		t.Errorf("the disconnect line lacks the redacted URL list:\n%s", d.logs.String())
	}
	d.stop()
	d.stop = func() {}
	if strings.Contains(d.logs.String(), "error gathering metrics") {
		t.Errorf("a scrape failed in part:\n%s", d.logs.String())
	}
	// One key scheme: every line names its component; those of a controller's parts name it.
	perController := map[string]bool{"inventory": true, "guest": true, "events": true}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(d.logs.String()), "\n") {
		m := regexp.MustCompile(` component=(\S+)`).FindStringSubmatch(line)
		if m == nil {
			t.Errorf("log line without component: %s", line)
			continue
		}
		seen[m[1]] = true
		if perController[m[1]] && !strings.Contains(line, " controller=alpha") {
			t.Errorf("%s log line without controller: %s", m[1], line)
		}
	}
	for _, c := range []string{"daemon", "web", "inventory", "nats"} {
		if !seen[c] {
			t.Errorf("no log line of component %s:\n%s", c, d.logs.String())
		}
	}
	for what, text := range map[string]string{"/": page, "json status": js, "/metrics": metrics, "logs": d.logs.String()} {
		for _, secret := range []string{testutil.SecretToken, natsPassword} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds the secret %q", what, secret)
			}
		}
	}
}
