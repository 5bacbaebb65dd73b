// Fuzz target of the config loader: Parse never panics; each problem of a refused file names the
// line to edit (the key's own or, for a key left out, the nearest key above it in the file), and
// an accepted config dumped to YAML reads back the same.

package config

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func FuzzParse(f *testing.F) {
	f.Setenv("POD_NAME", "veil-exporter-0") // the HA ConfigMap's instance: ${POD_NAME}
	for _, cfg := range shippedConfigs(f) {
		f.Add(cfg)
	}
	base := "controllers:\n  - name: prod\n    url: https://veil.example.com\n    token_file: testdata/token\n"
	for _, s := range []string{
		base + "events: {enabled: false}\n",
		base + "collect:\n  intervall: 30s\n",
		base + "    max_conns: 3\n",
		base + "collect:\n  interval: soon\n",
		base + "  - name: prod\n    url: https://b.example.com\n    token: x\n",
		base + "collect:\n  domain_include: \"([\"\n",
		base + "nats:\n  user: u\n  creds_file: testdata/token\n  subject_prefix: veil.*\n",
		base + "nats:\n  embedded: {enabled: true, sync: fast}\n",
		base + "ha: {enabled: true, lease_ttl: 1s}\nevents:\n  checkpoint: {store: nats_kv}\n",
		base + "sd:\n  port: 65536\n",
		"x: &c {interval: 0s}\ncollect: *c\n" + base,
		"collect: {<<: {interval: -1s}}\n" + base,
		"controllers:\n  - {name: a, url: 'http://x', token: '${VEIL_FUZZ_UNSET}', timeout: 0s}\n",
		"controllers:\n  - {name: a, url: 'http://x', token: t}\ncollect:\n  domain_include: \"$${LITERAL}\"\n",
		"controllers:\n  - {name: a.b, url: veil.example.com, token: t, token_file: t}\n",
		"", "controllers: []\n", "controllers:\n\t- x\n", "- 1\n", "{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			checkProblemLines(t, data, err)
			return
		}
		checkDumpReads(t, cfg)
	})
}

// shippedConfigs are the configs the repository ships: the example and those of the systemd and
// Kubernetes deployments, their token files replaced by one that exists.
func shippedConfigs(f *testing.F) [][]byte {
	tokenFile := regexp.MustCompile(`token_file: /\S+`)
	var out [][]byte
	for _, p := range []string{"../config.example.yaml", "../deploy/systemd/config-ha.yaml",
		"../deploy/kubernetes/base/configmap.yaml", "../deploy/kubernetes/ha/configmap.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var cm struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(b, &cm); err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		if cm.Kind == "ConfigMap" {
			b = []byte(cm.Data["config.yaml"])
		}
		b = tokenFile.ReplaceAll(b, []byte("token_file: testdata/token"))
		if _, err := Parse(b); err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		out = append(out, b)
	}
	return out
}

var lineRE = regexp.MustCompile(`line (\d+)`)

// checkProblemLines fails unless every line err names is in the file, every problem of the
// decoding names one, and every problem of the validation names the line of its key or of the
// nearest key above it that the file has (none only when the file has none of them).
func checkProblemLines(t *testing.T, data []byte, err error) {
	t.Helper()
	expanded, xerr := expandEnv(data)
	if xerr != nil {
		expanded = data // the unset variables are named with the lines of data
	}
	lines := yamlLines(expanded)
	for _, m := range lineRE.FindAllStringSubmatch(err.Error(), -1) {
		if n, _ := strconv.Atoi(m[1]); n < 1 || n > lines {
			t.Fatalf("error names line %d of %d: %v", n, lines, err)
		}
	}
	var p *problems
	if !errors.As(err, &p) {
		return // not YAML (as yaml.v3 reports it) or no variable: the lines named are checked
	}
	var root yaml.Node
	if yerr := yaml.Unmarshal(expanded, &root); yerr != nil {
		t.Fatalf("problems %v in a file that is not YAML: %v", err, yerr)
	}
	keys := keyLines(&root)
	for _, msg := range p.list {
		n, rest := 0, msg
		if m := regexp.MustCompile(`^line (\d+): `).FindStringSubmatch(msg); m != nil {
			n, _ = strconv.Atoi(m[1])
			rest = msg[len(m[0]):]
		}
		if p.prefix == "" { // the decoding's: yaml.v3 names the line of the node
			if n == 0 {
				t.Fatalf("problem %q names no line", msg)
			}
			continue
		}
		path, _, _ := strings.Cut(rest, ": ")
		want := 0
		for k := path; k != "" && want == 0; k = parentKey(k) {
			want = keys[k]
		}
		if n != want {
			t.Fatalf("problem %q names line %d; the file has the key (or the nearest above it) on line %d", msg, n, want)
		}
	}
}

// yamlLines counts the lines of b as YAML does: a line ends at \n, \r\n, a lone \r, NEL, LS or PS.
func yamlLines(b []byte) int {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	return 1 + strings.Count(s, "\n") + strings.Count(s, "\r") + strings.Count(s, "\u0085") + strings.Count(s, "\u2028") + strings.Count(s, "\u2029")
}

// checkDumpReads dumps cfg as YAML (secrets masked, a literal ${ escaped as $${), reads it back and
// fails unless it gives cfg again.
func checkDumpReads(t *testing.T, cfg *Config) {
	t.Helper()
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatalf("accepted config does not dump: %v", err)
	}
	out = bytes.ReplaceAll(out, []byte("${"), []byte("$${"))
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("dump of an accepted config is refused: %v\n%s", err, out)
	}
	if len(again.Controllers) == len(cfg.Controllers) {
		for i, c := range cfg.Controllers {
			if (c.Token == "") != (again.Controllers[i].Token == "") {
				t.Fatalf("controller %d: token %q read back as %q", i, c.Token, again.Controllers[i].Token)
			}
			again.Controllers[i].Token = c.Token // masked in the dump
		}
	}
	if (cfg.NATS.Password == "") != (again.NATS.Password == "") {
		t.Fatalf("nats.password %q read back as %q", cfg.NATS.Password, again.NATS.Password)
	}
	again.NATS.Password = cfg.NATS.Password
	again.NATS.Configured = cfg.NATS.Configured // a dump writes every section, nats: included
	if !reflect.DeepEqual(cfg, again) {
		t.Fatalf("dump reads back differently:\n%+v\n%+v\n%s", *cfg, *again, out)
	}
}
