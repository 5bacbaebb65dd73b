package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// runbookBase is where every alert's runbook_url points: the runbooks of docs/runbooks/ on the
// project's home (the systemd unit's Documentation=).
const runbookBase = "https://github.com/veil-exporter/veil-exporter/blob/main/docs/runbooks/"

// runbookSections are the sections of every runbook, in this order (as KubeVirt's runbooks).
var runbookSections = []string{"Meaning", "Impact", "Diagnosis", "Mitigation"}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/veil-exporter.rules.yml"), &f); err != nil {
		t.Fatal(err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("no rules in prometheus/veil-exporter.rules.yml")
	}
	return rules
}

var (
	pascalCase  = regexp.MustCompile(`^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$`)
	recordName  = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)
	mdHeading   = regexp.MustCompile(`(?m)^(#{1,6}) (.+)$`)
	templateVar = regexp.MustCompile(`\{\{`)
)

// TestAlertsAreLinted checks every alert as KubeVirt's pkg/monitoring/rules/rules_test.go does:
// its name, its severity, its summary and description, and a runbook with the four sections.
func TestAlertsAreLinted(t *testing.T) {
	alerts := map[string]bool{}
	for _, r := range readRules(t) {
		if r.Record != "" {
			if !recordName.MatchString(r.Record) {
				t.Errorf("recording rule %s: want level:metric:operations", r.Record)
			}
			continue
		}
		name := r.Alert
		alerts[name] = true
		if !pascalCase.MatchString(name) || len(name) > 50 {
			t.Errorf("alert %q: want a PascalCase name of at most 50 characters", name)
		}
		if !strings.HasPrefix(name, "Veil") {
			t.Errorf("alert %s: want the prefix Veil", name)
		}
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", name, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s: annotation %s is missing", name, a)
			}
		}
		// The description says what is wrong; how to look and what to do is the runbook's.
		if d := r.Annotations["description"]; strings.Contains(d, "\n") || strings.Contains(d, "Check:") || strings.Contains(d, "Fix:") {
			t.Errorf("alert %s: the description holds runbook text (Check:, Fix:, several lines); move it to the runbook", name)
		}
		if templateVar.MatchString(r.Annotations["description"]) || templateVar.MatchString(r.Annotations["runbook_url"]) {
			t.Errorf("alert %s: description and runbook_url are static text (the summary names the object)", name)
		}
		if want := runbookBase + name + ".md"; r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
		}
		checkRunbook(t, name)
	}

	// docs/alerts.md lists every alert with a link to its runbook.
	index := string(readFile(t, "../docs/alerts.md"))
	for name := range alerts {
		if !strings.Contains(index, "(runbooks/"+name+".md)") {
			t.Errorf("docs/alerts.md does not link %s's runbook (runbooks/%s.md)", name, name)
		}
	}

	// Every runbook belongs to an alert.
	files, err := filepath.Glob("../docs/runbooks/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".md"); !alerts[name] {
			t.Errorf("docs/runbooks/%s.md: no alert %s in prometheus/veil-exporter.rules.yml", name, name)
		}
	}
}

// checkRunbook: docs/runbooks/<alert>.md is titled with the alert's name and has the four
// sections, each with text, in order, and no others.
func checkRunbook(t *testing.T, alert string) {
	t.Helper()
	path := filepath.Join("..", "docs", "runbooks", alert+".md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("alert %s: runbook: %v", alert, err)
		return
	}
	text := string(b)
	heads := mdHeading.FindAllStringSubmatchIndex(text, -1)
	var sections []string
	for i, h := range heads {
		level, title := text[h[2]:h[3]], text[h[4]:h[5]]
		switch {
		case i == 0:
			if level != "#" || title != alert {
				t.Errorf("%s: first heading %q, want # %s", path, text[h[0]:h[1]], alert)
			}
			continue
		case level != "##":
			continue
		}
		sections = append(sections, title)
		end := len(text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		if strings.TrimSpace(text[h[1]:end]) == "" {
			t.Errorf("%s: section %s is empty", path, title)
		}
	}
	if !slices.Equal(sections, runbookSections) {
		t.Errorf("%s: sections %v, want %v", path, sections, runbookSections)
	}
}
