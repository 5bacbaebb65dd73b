// This file checks the Helm chart (helm/veil-exporter) against the daemon's configuration: the
// configuration each of its renders carries (tools/chart/testdata, which tools/chart proves
// equal to the chart's renders) is one the daemon accepts, and the config and controllers parts
// of its values.schema.json are derived from the configuration's types. It lives here, in the
// daemon's module, so that tools/chart needs none of the daemon's dependencies.

package deploy

import (
	"encoding/json"
	"flag"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/veil-exporter/veil-exporter/config"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite the config and controllers parts of helm/veil-exporter/values.schema.json")

// chartConfigFile is a file the chart's configuration names inside the pod (tokens, CA bundles).
var chartConfigFile = regexp.MustCompile(`/etc/veil-exporter/[^\s"']+`)

func TestHelmChartRendersConfigsTheDaemonAccepts(t *testing.T) {
	goldens, err := filepath.Glob("../tools/chart/testdata/*.yaml")
	if err != nil || len(goldens) < 4 {
		t.Fatalf("%d renders of the chart in tools/chart/testdata (%v)", len(goldens), err)
	}
	for _, golden := range goldens {
		t.Run(strings.TrimSuffix(filepath.Base(golden), ".yaml"), func(t *testing.T) {
			data := chartConfig(t, golden)
			dir := t.TempDir()
			for _, p := range chartConfigFile.FindAllString(data, -1) {
				local := filepath.Join(dir, strings.TrimPrefix(p, "/etc/veil-exporter/"))
				if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(local, []byte("jwt test\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("POD_NAME", "veil-exporter-7d4b9c-x2x9z")
			cfg, err := config.Parse([]byte(strings.ReplaceAll(data, "/etc/veil-exporter/", dir+"/")))
			if err != nil {
				t.Fatalf("the daemon refuses the chart's configuration: %v\n%s", err, data)
			}
			for _, c := range cfg.Controllers {
				if want := path.Join(dir, "tokens", c.Name+".token"); c.TokenFile != want {
					t.Errorf("controller %s reads its token from %s, not the Secret's key %s.token", c.Name, c.TokenFile, c.Name)
				}
			}
			if cfg.HA.Enabled && cfg.HA.Instance != "veil-exporter-7d4b9c-x2x9z" {
				t.Errorf("ha.instance = %q, want the pod's name", cfg.HA.Instance)
			}
		})
	}
}

// chartConfig returns config.yaml of the ConfigMap <release>-config in a render of the chart.
func chartConfig(t *testing.T, golden string) string {
	t.Helper()
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", golden, err)
		}
		if obj.Kind == "ConfigMap" && strings.HasSuffix(obj.Metadata.Name, "-config") {
			return obj.Data["config.yaml"]
		}
	}
	t.Fatalf("%s has no ConfigMap *-config", golden)
	return ""
}

// schemaOf is the JSON schema of a configuration type as the daemon reads it from YAML: structs
// are closed objects of their yaml-tagged fields; durations and types that parse themselves
// from a scalar (regexps, Prometheus durations, sync modes) are strings.
func schemaOf(t reflect.Type, leave ...string) map[string]any {
	if _, parsesItself := reflect.PointerTo(t).MethodByName("UnmarshalYAML"); parsesItself ||
		t == reflect.TypeFor[time.Duration]() {
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if f.IsExported() && name != "" && name != "-" && !slices.Contains(leave, name) {
				props[name] = schemaOf(f.Type)
			}
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	}
	panic("no schema for the configuration's type " + t.String())
}

func TestHelmSchemaFollowsTheConfigTypes(t *testing.T) {
	const file = "helm/veil-exporter/values.schema.json"
	data := readFile(t, file)
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	props := schema["properties"].(map[string]any)
	controllers := props["controllers"].(map[string]any)
	// config: the daemon's configuration but the controllers, which the chart writes; each
	// controller but its token, which comes from the Secret.
	wantConfig := schemaOf(reflect.TypeFor[config.Config](), "controllers")
	wantController := schemaOf(reflect.TypeFor[config.Controller](), "token", "token_file")
	wantController["required"] = []any{"name", "url"}
	if *updateSchema {
		props["config"], controllers["items"] = wantConfig, wantController
		out, err := json.MarshalIndent(schema, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for key, pair := range map[string][2]any{
		"config":            {props["config"], wantConfig},
		"controllers.items": {controllers["items"], wantController},
	} {
		got, _ := json.Marshal(pair[0])
		want, _ := json.Marshal(pair[1])
		if string(got) != string(want) {
			t.Errorf("%s's %s does not follow the config package (go test ./deploy -update-schema rewrites it):\n got %s\nwant %s",
				file, key, got, want)
		}
	}
}

// TestHelmChartCarriesTheRepositorysRulesAndDashboards: the chart holds copies of the alert
// rules and of every dashboard (Helm packs only what is inside the chart's directory), byte for
// byte the repository's, none missing and none extra (tools/chart's -update copies them again).
func TestHelmChartCarriesTheRepositorysRulesAndDashboards(t *testing.T) {
	same := func(src, cp string) {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cp)
		if err != nil {
			t.Errorf("%s: %v", cp, err)
			return
		}
		if string(a) != string(b) {
			t.Errorf("%s differs from %s: copy it again (cd tools/chart && go test ./... -update)", cp, src)
		}
	}
	same("prometheus/veil-exporter.rules.yml", "helm/veil-exporter/files/veil-exporter.rules.yml")
	srcs, _ := filepath.Glob("../dashboards/*.json")
	cps, _ := filepath.Glob("helm/veil-exporter/files/dashboards/*.json")
	if len(srcs) == 0 || len(srcs) != len(cps) {
		t.Errorf("the repository has %d dashboards, the chart %d", len(srcs), len(cps))
	}
	for _, s := range srcs {
		same(s, filepath.Join("helm/veil-exporter/files/dashboards", filepath.Base(s)))
	}
}
