// Package dashboards holds the Grafana dashboards of veil-exporter. They are embedded so that
// tests and tools can read them wherever the repository is checked out.
//
// Owns the Grafana dashboards; imports nothing of this module.
package dashboards

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
)

// FS holds the dashboard JSON files (overview.json, vm-detail.json, ...).
//
//go:embed *.json
var FS embed.FS

// matchAll gives every template variable a value that selects everything, so a panel query
// can run unchanged against a real Prometheus (Grafana would substitute the user's choice).
var matchAll = map[string]string{
	"controller":      ".*",
	"domain":          ".*",
	"domain_id":       ".*",
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__interval_ms":   "60000",
	"__range":         "1h",
	"__range_s":       "3600",
	"__range_ms":      "3600000",
}

// variableRef matches ${name}, ${name:format}, [[name]] and $name.
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)`)

// Queries returns the PromQL expression of every panel target, keyed by dashboard file name,
// in panel order, with template variables replaced by match-all values ($controller -> ".*",
// $__rate_interval -> "5m", ...). A variable it does not know is an error, so that a query
// never reaches Prometheus with a "$" left in it.
func Queries() (map[string][]string, error) {
	names, err := fs.Glob(FS, "*.json")
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(names))
	for _, name := range names {
		d, err := load(name)
		if err != nil {
			return nil, err
		}
		var exprs []string
		for _, p := range d.allPanels() {
			for _, t := range p.Targets {
				e, err := substitute(t.Expr)
				if err != nil {
					return nil, fmt.Errorf("%s: panel %d %q: %w", name, p.ID, p.Title, err)
				}
				exprs = append(exprs, e)
			}
		}
		out[name] = exprs
	}
	return out, nil
}

// substitute replaces every Grafana template variable in expr by its match-all value.
func substitute(expr string) (string, error) {
	var unknown []string
	res := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3] // exactly one group matched
		v, ok := matchAll[name]
		if !ok {
			unknown = append(unknown, name)
			return ref
		}
		return v
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "", fmt.Errorf("unknown template variable(s) %v in %q", unknown, expr)
	}
	return res, nil
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // panels of a collapsed row
}

type target struct {
	RefID        string          `json:"refId"`
	Expr         string          `json:"expr"`
	LegendFormat string          `json:"legendFormat"`
	Datasource   json.RawMessage `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."} in newer Grafana
	Datasource json.RawMessage `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   *string         `json:"allValue"`
	Hide       int             `json:"hide"`
}

// queryString returns the variable's query whichever of Grafana's two encodings it uses.
func (v variable) queryString() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &o) == nil {
		return o.Query
	}
	return ""
}

func load(name string) (dashboard, error) {
	b, err := FS.ReadFile(name)
	if err != nil {
		return dashboard{}, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return dashboard{}, fmt.Errorf("couldn't parse %s: %w", name, err)
	}
	return d, nil
}

// allPanels flattens rows: top-level panels followed in place by those inside collapsed rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}
