// This file checks the chart's values.schema.json: its config and controllers parts follow the
// daemon's configuration types (derived from them, so a key added to the daemon is a key the
// chart accepts), a wrong value is refused with a message naming its key, and the chart lints
// clean.

package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/veil-exporter/veil-exporter/config"
)

var durationType = reflect.TypeFor[time.Duration]()

// parsesItself says whether a type decodes itself from YAML (yaml.v3's or yaml.v2's
// UnmarshalYAML, as prometheus/common's model.Duration has).
func parsesItself(t reflect.Type) bool {
	_, ok := reflect.PointerTo(t).MethodByName("UnmarshalYAML")
	return ok
}

// schemaOf is the JSON schema of a configuration type as the daemon reads it from YAML: structs
// are closed objects of their yaml-tagged fields, durations and types that parse themselves
// from a scalar (regexps, Prometheus durations, sync modes) are strings.
func schemaOf(t reflect.Type, leave ...string) map[string]any {
	switch {
	case t == durationType, parsesItself(t):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" || contains(leave, name) {
				continue
			}
			props[name] = schemaOf(f.Type)
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	}
	panic("no schema for the configuration's type " + t.String())
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// generatedSchema is what values.schema.json holds for config (the daemon's configuration but
// the controllers, which the chart writes) and for each controller (but its token, which comes
// from the Secret).
func generatedSchema() map[string]any {
	cfg := schemaOf(reflect.TypeFor[config.Config](), "controllers")
	ctl := schemaOf(reflect.TypeFor[config.Controller](), "token", "token_file")
	ctl["required"] = []any{"name", "url"}
	return map[string]any{"config": cfg, "controllers": ctl}
}

func TestSchemaFollowsTheDaemonsConfiguration(t *testing.T) {
	path := filepath.Join(chartDir, "values.schema.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	props := schema["properties"].(map[string]any)
	gen := generatedSchema()
	if *update {
		props["config"] = gen["config"]
		props["controllers"].(map[string]any)["items"] = gen["controllers"]
		out, err := json.MarshalIndent(schema, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Compared through JSON, so that the file's []any and the generator's []any agree.
	for key, got := range map[string]any{"config": props["config"], "controllers.items": props["controllers"].(map[string]any)["items"]} {
		want := gen[strings.TrimSuffix(key, ".items")]
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("values.schema.json's %s is not the daemon's configuration (go test -update rewrites it):\n got %s\nwant %s", key, g, w)
		}
	}
}

func TestWrongValuesAreRefusedNamingTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, values, key string
	}{
		{"replicas is a number", `replicas: "three"`, "/replicas"},
		{"a misspelt top-level key", `serviceMonitr: {enabled: true}`, "serviceMonitr"},
		{"a daemon key of the wrong type", `config: {collect: {interval: 30}}`, "/config/collect/interval"},
		{"an unknown daemon key", `config: {guest: {enable: true}}`, "enable"},
		{"a token in the configuration", `controllers: [{name: a, url: "https://a", token: x}]`, "token"},
		{"a controller without url", `controllers: [{name: a}]`, "url"},
		{"an unknown pull policy", `image: {pullPolicy: Sometimes}`, "/image/pullPolicy"},
		{"no controller", `controllers: []`, "/controllers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderValues(t, vals)
			if err == nil {
				t.Fatalf("values %s rendered", tc.values)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("values %s: the error does not name %s: %v", tc.values, tc.key, err)
			}
		})
	}
}

func TestChartRefusesWhatTheDaemonWouldNotRun(t *testing.T) {
	for _, tc := range []struct {
		name, values, says string
	}{
		{"replicas with file checkpoints", "replicas: 2\nconfig: {events: {checkpoint: {store: file}}}", "nats_kv"},
		{"both monitors", "serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}", "choose one"},
		{"a controller without a token", "controllers: [{name: lab, url: \"https://lab\"}]", "tokens.lab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderValues(t, vals)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("values %q: error %v, want one saying %q", tc.values, err, tc.says)
			}
		})
	}
}

func TestChartLintsClean(t *testing.T) {
	cases := map[string]map[string]any{"defaults": nil}
	for name, file := range ciValues(t) {
		var vals map[string]any
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &vals); err != nil {
			t.Fatal(err)
		}
		cases[name] = vals
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			linter := lint.All(chartDir, vals, namespace, false)
			for _, m := range linter.Messages {
				if m.Severity > support.UnknownSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}
