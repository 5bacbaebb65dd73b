// This file renders the chart with the Helm library, as `helm template` does, for every
// ci/*-values.yaml, and compares each render with its golden file in testdata/.

package chart

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

var update = flag.Bool("update", false, "rewrite the golden files, and the chart's copies of the rules and dashboards")

const (
	chartDir = "../../deploy/helm/veil-exporter"
	// The release the goldens and the comparison with the kustomize base are rendered as: its
	// name holds the chart's, so the objects are named as the base's.
	releaseName = "veil-exporter"
	namespace   = "veil-exporter"
)

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// render renders the chart with the values of valuesFile ("" for the chart's defaults) as
// `helm template` does: client-only, schema checked, hooks and notes included.
func render(t *testing.T, valuesFile string) (string, error) {
	t.Helper()
	vals := map[string]any{}
	if valuesFile != "" {
		v, err := chartutil.ReadValuesFile(valuesFile)
		if err != nil {
			t.Fatalf("reading %s: %v", valuesFile, err)
		}
		vals = v
	}
	return renderValues(t, vals)
}

func renderValues(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	manifest, _, err := renderWithNotes(t, vals)
	return manifest, err
}

// renderWithNotes renders as renderValues does, and returns NOTES.txt rendered too.
func renderWithNotes(t *testing.T, vals map[string]any) (manifest, notes string, err error) {
	t.Helper()
	cfg := &action.Configuration{
		Releases:   storage.Init(driver.NewMemory()),
		KubeClient: &kubefake.PrintingKubeClient{Out: io.Discard},
		Log:        func(string, ...any) {},
	}
	install := action.NewInstall(cfg)
	install.ClientOnly = true
	install.DryRun = true
	install.Replace = true
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		b.WriteString("\n---\n# Source: " + h.Path + "\n" + h.Manifest)
	}
	return b.String(), rel.Info.Notes, nil
}

// manifests splits a render into its documents, in the order Helm printed them, leaving out
// empty ones.
func manifests(render string) []string {
	docs := releaseutil.SplitManifests(render)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if strings.TrimSpace(docs[k]) != "" {
			out = append(out, docs[k])
		}
	}
	return out
}

// ciValues lists the chart's ci/*-values.yaml by the name of its case (the file name without
// -values.yaml).
func ciValues(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{}
	for _, f := range files {
		cases[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = f
	}
	for _, want := range []string{"default", "ha", "existing-secret", "monitors"} {
		if cases[want] == "" {
			t.Errorf("no ci/%s-values.yaml", want)
		}
	}
	return cases
}

func TestEveryCIValuesFileRendersAsItsGolden(t *testing.T) {
	for name, file := range ciValues(t) {
		t.Run(name, func(t *testing.T) {
			vals, err := chartutil.ReadValuesFile(file)
			if err != nil {
				t.Fatal(err)
			}
			manifest, notes, err := renderWithNotes(t, vals)
			if err != nil {
				t.Fatalf("helm template -f %s: %v", file, err)
			}
			matchGolden(t, file, filepath.Join("testdata", name+".yaml"), manifest)
			matchGolden(t, file, filepath.Join("testdata", name+".NOTES.txt"), notes)
		})
	}
}

// matchGolden compares what the chart rendered from valuesFile with a golden file, which
// -update rewrites.
func matchGolden(t *testing.T, valuesFile, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the render of %s differs from %s (go test -update rewrites it):\n%s",
			valuesFile, golden, lineDiff("golden", string(want), "render", got))
	}
}

// lineDiff names the first lines where two texts part, enough to find the change; wantName
// and gotName say which is which.
func lineDiff(wantName, want, gotName, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  golden: " + wl + "\n  render: " + gl + "\n")
			shown++
		}
	}
	if len(w) != len(g) {
		b.WriteString(wantName + ": " + strconv.Itoa(len(w)) + " lines, " + gotName + ": " + strconv.Itoa(len(g)) + "\n")
	}
	return b.String()
}
