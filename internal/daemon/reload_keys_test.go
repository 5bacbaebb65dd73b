// Every key of the configuration, changed alone, is either refused by a reload, rebuilds the
// controllers it shapes, or is read afresh where it is used; none is silently ignored.

package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/config"
)

// keyPath is one leaf of config.Config: its dotted YAML path and the field indices that reach
// it (-1: the first element of a slice).
type keyPath struct {
	name  string
	index []int
}

var regexpType = reflect.TypeOf(config.Regexp{})

// configKeys walks t (config.Config) by reflection: every exported field that YAML reads, down
// to the leaves (values a key holds: numbers, strings, lists of strings, regexps), through
// structs and into the first element of lists of structs.
func configKeys(t reflect.Type, name string, index []int) []keyPath {
	switch {
	case t.Kind() == reflect.Struct && t != regexpType:
		var out []keyPath
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || tag == "-" {
				continue
			}
			if tag == "" {
				tag = strings.ToLower(f.Name)
			}
			out = append(out, configKeys(f.Type, strings.TrimPrefix(name+"."+tag, "."), append(index[:len(index):len(index)], i))...)
		}
		return out
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return configKeys(t.Elem(), name+"[0]", append(index[:len(index):len(index)], -1))
	}
	return []keyPath{{name: name, index: index}}
}

// change gives the leaf k of cfg another value.
func change(t *testing.T, cfg *config.Config, k keyPath) {
	t.Helper()
	v := reflect.ValueOf(cfg).Elem()
	for _, i := range k.index {
		if i < 0 {
			v = v.Index(0)
		} else {
			v = v.Field(i)
		}
	}
	switch {
	case v.Type() == regexpType:
		v.Set(reflect.ValueOf(config.MustRegexp("^changed$")))
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.CanInt():
		v.SetInt(v.Int() + 1)
	case v.CanFloat():
		v.SetFloat(v.Float() + 1)
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.Append(v, reflect.ValueOf("10.0.0.0/8").Convert(v.Type().Elem()))) // a network too
	default:
		t.Fatalf("%s: no way to change a %s: teach change", k.name, v.Type())
	}
}

// reloadOutcome is what a reload from old to cfg does, over a working NATS connection where
// old uses one: refused, rebuilds controller 0, or neither.
func reloadOutcome(old, cfg *config.Config) string {
	switch {
	case replicasChange(old, cfg, nil) != nil:
		return "refused"
	case cfg.UsesNATS() && natsChanged(old, cfg):
		return "rebuilt" // a new connection: keepable is not consulted
	case !reflect.DeepEqual(settingsOf(old, old.Controllers[0]), settingsOf(cfg, cfg.Controllers[0])):
		return "rebuilt"
	}
	return "kept"
}

// TestReloadComparesEveryKey changes every key of a configuration with everything on, one at
// a time, and asks what a reload does: the ha section and, with replicas, nats are refused;
// every key that shapes a controller rebuilds it; sd.* are read from the running configuration
// at each request. With replicas off, ha.* other than enabled are inert (the run with them on
// proves them refused).
func TestReloadComparesEveryKey(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("a CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	const yaml = "controllers:\n  - {name: alpha, url: 'https://veil.example', token: t, tls: {ca_file: %CA%}}\n" +
		"guest: {enabled: true}\nevents: {enabled: true, checkpoint: {store: nats_kv}}\nnats: {url: 'nats://127.0.0.1:4222'}\n"
	keys := configKeys(reflect.TypeOf(config.Config{}), "", nil)
	if len(keys) < 70 { // 74 when this was written: the walk must not lose keys
		t.Fatalf("only %d keys found: %v", len(keys), keys)
	}
	for _, replicas := range []bool{false, true} {
		body := strings.Replace(yaml, "%CA%", ca, 1)
		if replicas {
			body += "ha: {enabled: true}\n"
		}
		base := func() *config.Config {
			cfg, err := config.Parse([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			return cfg
		}
		for _, k := range keys {
			old, cfg := base(), base()
			change(t, cfg, k)
			if reflect.DeepEqual(old, cfg) {
				t.Errorf("replicas %v, %s: changing it changed nothing", replicas, k.name)
				continue
			}
			got := reloadOutcome(old, cfg)
			want := []string{"rebuilt"}
			switch {
			case k.name == "ha.enabled" || replicas && (strings.HasPrefix(k.name, "ha.") || strings.HasPrefix(k.name, "nats.")):
				want = []string{"refused"}
			case strings.HasPrefix(k.name, "ha."):
				want = []string{"kept"}
			case strings.HasPrefix(k.name, "sd."):
				want = []string{"kept"}
				if reflect.DeepEqual(webSource{&Daemon{cfg: old}}.Discovery(), webSource{&Daemon{cfg: cfg}}.Discovery()) {
					t.Errorf("replicas %v, %s: not read by /sd/domains", replicas, k.name)
				}
			}
			if !strings.Contains(strings.Join(want, ","), got) {
				t.Errorf("replicas %v, %s changed: a reload %s the controller, want %s", replicas, k.name, got, strings.Join(want, " or "))
			}
		}
	}
}
