package web

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
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

// pageCase is one edit of fullStatus and what its page must (and must not) hold.
type pageCase struct {
	name    string
	edit    func(*statusData)
	want    []string
	notWant []string
}

// pageCases are TestStatusPageRendering's.
var pageCases = []pageCase{
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
		name: "events dated ahead of the clock are shown with what they cost",
		edit: func(s *statusData) { s.Controllers[0].Events.Ahead, s.Controllers[0].Events.HeldBack = 40, 3 },
		want: []string{"<th>Dated ahead of this clock</th>", `<span class="badge wait">40</span> published, remembered by id`, `<span class="err">3 held back</span>`, "mend it"},
	},
	{
		name:    "no event dated ahead: a plain 0",
		want:    []string{"<th>Dated ahead of this clock</th><td>0</td>"},
		notWant: []string{"mend it"},
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

// TestStatusPageRendering renders fullStatus with each of pageCases' edits.
func TestStatusPageRendering(t *testing.T) {
	for _, tt := range pageCases {
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
