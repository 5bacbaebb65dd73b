// This file checks that a wrong value is refused with a message naming its key (by
// values.schema.json, whose config and controllers parts deploy/helm_test.go derives from the
// daemon's configuration types) or by the chart itself, and that the chart lints clean.

package chart

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

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
