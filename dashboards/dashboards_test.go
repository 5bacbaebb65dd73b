package dashboards

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// knownFamilies are the metric families the README lists (Metrics), including those beyond the first design.
// A histogram also exposes _bucket, _sum and _count.
var knownFamilies = map[string]string{
	"veil_up":                                       "gauge",
	"veil_collector_success":                        "gauge",
	"veil_collector_duration_seconds":               "gauge",
	"veil_collector_last_success_timestamp_seconds": "gauge",
	"veil_api_requests_total":                       "counter",
	"veil_api_request_duration_seconds":             "histogram",
	"veil_exporter_build_info":                      "gauge",
	"veil_controller_info":                          "gauge",
	"veil_node_info":                                "gauge",
	"veil_node_status":                              "gauge",
	"veil_node_cpus":                                "gauge",
	"veil_node_memory_bytes":                        "gauge",
	"veil_node_cpu_usage_ratio":                     "gauge",
	"veil_node_memory_usage_ratio":                  "gauge",
	"veil_node_domains":                             "gauge",
	"veil_node_domains_running":                     "gauge",
	"veil_cluster_info":                             "gauge",
	"veil_cluster_status":                           "gauge",
	"veil_cluster_cpus":                             "gauge",
	"veil_cluster_memory_bytes":                     "gauge",
	"veil_cluster_nodes":                            "gauge",
	"veil_cluster_cpu_usage_ratio":                  "gauge",
	"veil_cluster_memory_usage_ratio":               "gauge",
	"veil_datapool_info":                            "gauge",
	"veil_datapool_status":                          "gauge",
	"veil_datapool_size_bytes":                      "gauge",
	"veil_datapool_used_bytes":                      "gauge",
	"veil_datapool_free_bytes":                      "gauge",
	"veil_domain_info":                              "gauge",
	"veil_domain_guest_info":                        "gauge",
	"veil_domain_last_backup_timestamp_seconds":     "gauge",
	"veil_domain_last_backup_success":               "gauge",
	"veil_domain_status":                            "gauge",
	"veil_domain_power_state":                       "gauge",
	"veil_domain_cpus":                              "gauge",
	"veil_domain_memory_bytes":                      "gauge",
	"veil_domain_cpu_usage_ratio":                   "gauge",
	"veil_domain_memory_usage_ratio":                "gauge",
	"veil_domain_guest_agent_connected":             "gauge",
	"veil_guest_ping_success":                       "gauge",
	"veil_guest_ping_duration_seconds":              "gauge",
	"veil_guest_os_info":                            "gauge",
	"veil_guest_filesystem_size_bytes":              "gauge",
	"veil_guest_filesystem_used_bytes":              "gauge",
	"veil_guest_clock_offset_seconds":               "gauge",
	"veil_guest_command_errors_total":               "counter",
	"veil_guest_network_receive_bytes_total":        "counter",
	"veil_guest_network_receive_packets_total":      "counter",
	"veil_guest_network_receive_errors_total":       "counter",
	"veil_guest_network_receive_drop_total":         "counter",
	"veil_guest_network_transmit_bytes_total":       "counter",
	"veil_guest_network_transmit_packets_total":     "counter",
	"veil_guest_network_transmit_errors_total":      "counter",
	"veil_guest_network_transmit_drop_total":        "counter",
	"veil_guest_disk_read_bytes_total":              "counter",
	"veil_guest_disk_written_bytes_total":           "counter",
	"veil_guest_disk_reads_completed_total":         "counter",
	"veil_guest_disk_writes_completed_total":        "counter",
	"veil_guest_disk_read_time_seconds_total":       "counter",
	"veil_guest_disk_write_time_seconds_total":      "counter",
	"veil_guest_disk_io_time_seconds_total":         "counter",
	"veil_guest_cpu_seconds_total":                  "counter",
	"veil_guest_load1":                              "gauge",
	"veil_guest_load5":                              "gauge",
	"veil_guest_load15":                             "gauge",
	"veil_tasks":                                    "gauge",
	"veil_tasks_finished_total":                     "counter",
	"veil_task_duration_seconds":                    "histogram",
	"veil_events_published_total":                   "counter",
	"veil_events_publish_errors_total":              "counter",
	"veil_events_duplicates_total":                  "counter",
	"veil_events_gaps_total":                        "counter",
	"veil_events_gap_episodes_total":                "counter",
	"veil_events_publish_conflicts_total":           "counter",
	"veil_events_position_adoptions_total":          "counter",
	"veil_events_rewinds_total":                     "counter",
	"veil_events_last_published_timestamp_seconds":  "gauge",
	"veil_events_backlog":                           "gauge",
	"veil_ha_leader":                                "gauge",
	"veil_ha_lease_transitions_total":               "counter",
	"veil_ha_instances":                             "gauge", // the one family without a controller label
	// The table's "also exported" list.
	"veil_config_last_reload_successful":                "gauge",
	"veil_guest_sweep_duration_seconds":                 "gauge",
	"veil_guest_checked_domains":                        "gauge",
	"veil_guest_eligible_domains":                       "gauge",
	"veil_nats_connected":                               "gauge",
	"veil_config_last_reload_success_timestamp_seconds": "gauge",
	"veil_guest_unsupported_domains":                    "gauge",
}

var wantDashboards = []string{"capacity.json", "events-exporter.json", "guest-health.json", "overview.json", "vm-detail.json"}

// recordedNames are the series the shipped recording rules record: panels may draw them (the
// Capacity dashboard does), since the rules ship beside the dashboards.
func recordedNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "veil-exporter.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the rules file records nothing")
	}
	return out
}

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(FS, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != strings.Join(wantDashboards, ",") {
		t.Fatalf("embedded dashboards = %v, want %v", names, wantDashboards)
	}
	return names
}

func loadT(t *testing.T, name string) dashboard {
	t.Helper()
	d, err := load(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDashboardsAreValidCurrentSchemaJSON(t *testing.T) {
	uids := map[string]string{}
	for _, name := range dashboardFiles(t) {
		t.Run(name, func(t *testing.T) {
			b, _ := FS.ReadFile(name)
			if !json.Valid(b) {
				t.Fatal("not valid JSON")
			}
			d := loadT(t, name)
			if d.SchemaVersion < 39 {
				t.Errorf("schemaVersion = %d, want >= 39", d.SchemaVersion)
			}
			if d.UID == "" || d.Title == "" {
				t.Errorf("uid %q, title %q: both must be set", d.UID, d.Title)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q also used by %s", d.UID, other)
			}
			uids[d.UID] = name
		})
	}
}

func TestDashboardsHaveDatasourceAndControllerVariables(t *testing.T) {
	for _, name := range dashboardFiles(t) {
		t.Run(name, func(t *testing.T) {
			vars := map[string]variable{}
			for _, v := range loadT(t, name).Templating.List {
				vars[v.Name] = v
			}
			ds, ok := vars["datasource"]
			if !ok || ds.Type != "datasource" || ds.queryString() != "prometheus" {
				t.Errorf("datasource variable = %+v, want type datasource with query prometheus", ds)
			}
			c, ok := vars["controller"]
			if !ok {
				t.Fatal("no controller variable")
			}
			if c.Type != "query" || c.queryString() != "label_values(veil_up, controller)" || !c.Multi || !c.IncludeAll {
				t.Errorf("controller variable: type %q query %q multi %v includeAll %v; want a multi, include-all query of label_values(veil_up, controller)",
					c.Type, c.queryString(), c.Multi, c.IncludeAll)
			}
			if c.AllValue == nil || *c.AllValue != ".*" {
				t.Errorf("controller allValue = %v, want .* (so All also matches controllers that appear later)", c.AllValue)
			}
		})
	}
}

func TestVMDetailSelectsOneVMByNameAndDerivesItsIDs(t *testing.T) {
	vars := map[string]variable{}
	for _, v := range loadT(t, "vm-detail.json").Templating.List {
		vars[v.Name] = v
	}
	tests := []struct {
		name, query string
		hidden      bool
	}{
		{"domain", `label_values(veil_domain_info{controller=~"$controller"}, domain)`, false},
		{"domain_id", `label_values(veil_domain_info{controller=~"$controller", domain="$domain"}, domain_id)`, true},
	}
	for _, tt := range tests {
		v, ok := vars[tt.name]
		if !ok {
			t.Errorf("no %s variable", tt.name)
			continue
		}
		if v.queryString() != tt.query {
			t.Errorf("%s query = %q, want %q", tt.name, v.queryString(), tt.query)
		}
		if hidden := v.Hide == 2; hidden != tt.hidden {
			t.Errorf("%s hidden = %v, want %v", tt.name, hidden, tt.hidden)
		}
	}
	// "All" of domain_id must expand to the ids of $domain only, never to ".*".
	if id := vars["domain_id"]; !id.IncludeAll || id.AllValue != nil {
		t.Errorf("domain_id: includeAll %v allValue %v; want includeAll without allValue", id.IncludeAll, id.AllValue)
	}
}

// TestNoHardCodedDatasource walks every object of every dashboard: any "datasource" reference
// anywhere (panels, targets, variables) must be the ${datasource} variable.
func TestNoHardCodedDatasource(t *testing.T) {
	for _, name := range dashboardFiles(t) {
		t.Run(name, func(t *testing.T) {
			b, _ := FS.ReadFile(name)
			var doc any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			for _, bad := range badDatasourceRefs(doc, "$") {
				t.Error(bad)
			}
		})
	}
}

func badDatasourceRefs(v any, path string) []string {
	var bad []string
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			p := path + "." + k
			if k == "datasource" {
				ref, ok := child.(map[string]any)
				if !ok || ref["uid"] != "${datasource}" || ref["type"] != "prometheus" {
					bad = append(bad, fmt.Sprintf("%s = %v, want {type: prometheus, uid: ${datasource}}", p, child))
				}
				continue
			}
			bad = append(bad, badDatasourceRefs(child, p)...)
		}
	case []any:
		for i, child := range v {
			bad = append(bad, badDatasourceRefs(child, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return bad
}

func TestEveryPanelQueriesTheDatasourceVariable(t *testing.T) {
	const want = `{"type":"prometheus","uid":"${datasource}"}`
	for _, name := range dashboardFiles(t) {
		t.Run(name, func(t *testing.T) {
			ids := map[int]string{}
			for _, p := range loadT(t, name).allPanels() {
				if prev, dup := ids[p.ID]; dup {
					t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
				}
				ids[p.ID] = p.Title
				if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("panel %q: gridPos x=%d w=%d outside the 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
				}
				if p.Type == "row" {
					continue // rows only group panels; they have no queries
				}
				if compact(p.Datasource) != want {
					t.Errorf("panel %q datasource = %s, want %s", p.Title, p.Datasource, want)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no targets", p.Title)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q target %s has an empty expr", p.Title, tg.RefID)
					}
					if compact(tg.Datasource) != want {
						t.Errorf("panel %q target %s datasource = %s, want %s", p.Title, tg.RefID, tg.Datasource, want)
					}
					if tg.RefID == "" || refs[tg.RefID] {
						t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
					}
					refs[tg.RefID] = true
				}
			}
		})
	}
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return strings.ReplaceAll(string(b), `\u0026`, "&")
}

var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	metricName    = regexp.MustCompile(`\b(?:[a-zA-Z_][a-zA-Z0-9_]*:)?veil_[a-zA-Z0-9_:]*`)
)

// metricNames returns the veil_ metric names an expression selects, recorded ones
// (level:veil_...:operation) whole; label values are ignored.
func metricNames(expr string) []string {
	return metricName.FindAllString(stringLiteral.ReplaceAllString(expr, `""`), -1)
}

func isKnownMetric(name string) bool {
	if _, ok := knownFamilies[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && knownFamilies[base] == "histogram" {
			return true
		}
	}
	return false
}

func TestMetricNamesExtraction(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []string
	}{
		{"selector with label values that look like metrics",
			`veil_up{controller=~"veil_fake"}`, []string{"veil_up"}},
		{"join of two families",
			`a_b * on (job) group_left (node) veil_node_info + veil_node_cpus`, []string{"veil_node_info", "veil_node_cpus"}},
		{"histogram bucket", `histogram_quantile(0.9, rate(veil_task_duration_seconds_bucket[5m]))`, []string{"veil_task_duration_seconds_bucket"}},
		{"no veil metric", `vector(0)`, nil},
		{"recorded series", `node_id:veil_vcpus_per_cpu:ratio * on (node_id) group_left (node) veil_node_info`, []string{"node_id:veil_vcpus_per_cpu:ratio", "veil_node_info"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := metricNames(tt.expr)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("metricNames(%q) = %v, want %v", tt.expr, got, tt.want)
			}
		})
	}
	if isKnownMetric("veil_up_bucket") || !isKnownMetric("veil_api_request_duration_seconds_count") || isKnownMetric("veil_nodes") {
		t.Error("isKnownMetric accepts a histogram suffix on a gauge, or rejects one on a histogram, or accepts an unknown family")
	}
}

func TestQueriesUseOnlyKnownMetricFamilies(t *testing.T) {
	recorded := recordedNames(t)
	for _, name := range dashboardFiles(t) {
		t.Run(name, func(t *testing.T) {
			d := loadT(t, name)
			var exprs []string
			for _, p := range d.allPanels() {
				for _, tg := range p.Targets {
					exprs = append(exprs, tg.Expr)
					if len(metricNames(tg.Expr)) == 0 {
						t.Errorf("panel %q: %q selects no veil_ metric", p.Title, tg.Expr)
					}
				}
			}
			for _, v := range d.Templating.List {
				if v.Type == "query" {
					exprs = append(exprs, v.queryString())
				}
			}
			for _, e := range exprs {
				for _, m := range metricNames(e) {
					if !isKnownMetric(m) && !recorded[m] {
						t.Errorf("unknown metric %s in %q", m, e)
					}
				}
			}
		})
	}
}

func TestSubstituteReplacesVariablesWithMatchAllValues(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"plain variables", `rate(veil_up{controller=~"$controller"}[$__rate_interval])`, `rate(veil_up{controller=~".*"}[5m])`, false},
		{"longest name wins", `veil_domain_cpus{domain_id=~"$domain_id", domain=~"$domain"}`, `veil_domain_cpus{domain_id=~".*", domain=~".*"}`, false},
		{"braced with format", `veil_up{controller=~"${controller:regex}"}[${__range}]`, `veil_up{controller=~".*"}[1h]`, false},
		{"legacy brackets", `veil_up{controller=~"[[controller]]"}`, `veil_up{controller=~".*"}`, false},
		{"interval", `increase(veil_events_gaps_total[$__interval])`, `increase(veil_events_gaps_total[1m])`, false},
		{"unknown variable is an error", `veil_up{controller=~"$contoller"}`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := substitute(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("substitute(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("substitute(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestQueriesReturnsEveryTargetWithoutVariables(t *testing.T) {
	q, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dashboardFiles(t) {
		var targets int
		for _, p := range loadT(t, name).allPanels() {
			targets += len(p.Targets)
		}
		if len(q[name]) != targets || targets == 0 {
			t.Errorf("%s: Queries returned %d expressions, the dashboard has %d targets", name, len(q[name]), targets)
		}
		for _, e := range q[name] {
			if strings.Contains(e, "$") || strings.Contains(e, "[[") {
				t.Errorf("%s: variable left in %q", name, e)
			}
		}
	}
}

// TestQueriesParseWithPromtool has Prometheus' own parser check every query, written as
// recording rules, so that a typo fails here rather than as an empty Grafana panel.
func TestQueriesParseWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not in PATH: install Debian's prometheus package (.ci/run does); the PromQL parse check needs it")
	}
	q, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, name := range wantDashboards {
		for i, e := range q[name] {
			rules = append(rules, rule{fmt.Sprintf("dashboard:%s:%d", strings.NewReplacer(".json", "", "-", "_").Replace(name), i), e})
		}
	}
	doc, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboards.rules.json") // JSON is YAML
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(string(out), want) {
		t.Errorf("promtool output lacks %q:\n%s", want, out)
	}
}

// TestDashboardsShowTheFamiliesTheyAreFor pins where each family users look for is drawn, so a
// panel that is dropped or renamed by accident fails here.
func TestDashboardsShowTheFamiliesTheyAreFor(t *testing.T) {
	want := map[string][]string{
		"overview.json": {"veil_domain_last_backup_timestamp_seconds", "veil_domain_last_backup_success",
			"veil_tasks_finished_total", "veil_task_duration_seconds_bucket"},
		"guest-health.json": {"veil_guest_network_receive_bytes_total", "veil_guest_network_transmit_bytes_total",
			"veil_guest_network_receive_errors_total", "veil_guest_network_transmit_drop_total"},
		"vm-detail.json": {"veil_domain_info", "veil_domain_guest_info",
			"veil_guest_network_receive_bytes_total", "veil_guest_network_transmit_bytes_total",
			"veil_guest_network_receive_errors_total", "veil_guest_network_transmit_errors_total",
			"veil_guest_network_receive_drop_total", "veil_guest_network_transmit_drop_total",
			"veil_domain_last_backup_timestamp_seconds", "veil_domain_last_backup_success"},
		"capacity.json": {"datapool_id:veil_datapool_free_bytes:days_until_full", "veil_datapool_free_bytes",
			"node_id:veil_vcpus_per_cpu:ratio", "node_id:veil_memory_overcommit:ratio",
			"cluster:veil_vcpus_per_cpu:ratio", "cluster:veil_memory_overcommit:ratio",
			"veil_domain_last_backup_timestamp_seconds"},
		"events-exporter.json": {"veil_events_published_total", "veil_events_gaps_total", "veil_events_gap_episodes_total",
			"veil_events_last_published_timestamp_seconds", "veil_events_rewinds_total", "veil_events_publish_conflicts_total"},
	}
	for name, families := range want {
		used := map[string]bool{}
		for _, p := range loadT(t, name).allPanels() {
			for _, tg := range p.Targets {
				for _, m := range metricNames(tg.Expr) {
					used[m] = true
				}
			}
		}
		for _, f := range families {
			if !used[f] {
				t.Errorf("%s: no panel queries %s", name, f)
			}
		}
	}
}

var (
	taskFamily   = regexp.MustCompile(`\bveil_tasks?_(finished_total|duration_seconds)`)
	nameGrouping = regexp.MustCompile(`\b(by|without)\s*\([^)]*\bname\b[^)]*\)|\bname\s*(=|!=|=~|!~)\s*"`)
)

// TestTaskPanelsUseKindNotName: the task label is kind (a name with entity names replaced by
// their class); a panel still grouping or filtering by name would draw one empty series.
func TestTaskPanelsUseKindNotName(t *testing.T) {
	if !nameGrouping.MatchString(`sum by (controller, name) (x)`) || nameGrouping.MatchString(`sum by (controller, kind) (x)`) {
		t.Fatal("nameGrouping does not tell a grouping by name from one by kind")
	}
	n := 0
	for _, name := range dashboardFiles(t) {
		for _, p := range loadT(t, name).allPanels() {
			for _, tg := range p.Targets {
				if !taskFamily.MatchString(tg.Expr) {
					continue
				}
				n++
				if nameGrouping.MatchString(tg.Expr) {
					t.Errorf("%s: panel %q groups or filters tasks by name: %s", name, p.Title, tg.Expr)
				}
				if strings.Contains(tg.LegendFormat, "{{name}}") {
					t.Errorf("%s: panel %q legend %q uses the task label name", name, p.Title, tg.LegendFormat)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no panel queries the task families")
	}
}

// histogramSeries matches a histogram family read through its classic series.
var histogramSeries = regexp.MustCompile(`\b(veil_\w+_seconds)_(bucket|count|sum)\b`)

// TestHistogramQueriesAnswerInBothWorlds: a query that reads a histogram's classic series also
// reads its native form, so it answers whether Prometheus stores the one (text, OpenMetrics,
// or protobuf without native histograms) or the other (protobuf with native histograms on,
// which keeps only the native form unless always_scrape_classic_histograms is set). The
// end-to-end test runs every query against both.
func TestHistogramQueriesAnswerInBothWorlds(t *testing.T) {
	n := 0
	for _, name := range dashboardFiles(t) {
		for _, p := range loadT(t, name).allPanels() {
			for _, tg := range p.Targets {
				for _, m := range histogramSeries.FindAllStringSubmatch(tg.Expr, -1) {
					n++
					native := regexp.MustCompile(`\b` + m[1] + `[{\[]`)
					if m[2] != "bucket" || !native.MatchString(tg.Expr) || !strings.Contains(tg.Expr, ") or histogram_quantile(") {
						t.Errorf("%s: panel %q reads %s_%s without the native form beside it: %s", name, p.Title, m[1], m[2], tg.Expr)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no panel reads a histogram")
	}
}
