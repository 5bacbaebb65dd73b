// This file keeps the chart and the rest of the repository from drifting apart: its renders
// against the kustomize manifests (deploy/kubernetes/base and ha), its rules and dashboards against
// deploy/prometheus and dashboards/, its version against VERSION.

package chart

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomize renders a directory of deploy/kubernetes with the kustomize library `kubectl
// apply -k` embeds, and decodes it strictly.
func kustomize(t *testing.T, dir string) objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "../../deploy/kubernetes/"+dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes/%s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeStrict(t, string(out))
}

// chartAdds is what the chart's selectors hold beyond the kustomize manifests': the release, so
// that two releases in one namespace select their own pods.
var chartAdds = map[string]string{"app.kubernetes.io/instance": releaseName}

// sameSelector checks that the chart selects by the manifests' labels plus chartAdds, and
// returns the manifests' so the rest of the objects can be compared whole.
func sameSelector(t *testing.T, what string, chart, base map[string]string) map[string]string {
	t.Helper()
	want := maps.Clone(base)
	maps.Copy(want, chartAdds)
	if !reflect.DeepEqual(chart, want) {
		t.Errorf("%s: the chart selects %v, the manifests %v (plus %v expected)", what, chart, base, chartAdds)
	}
	return base
}

// The chart with its defaults renders deploy/kubernetes/base's objects, and with
// ci/ha-values.yaml deploy/kubernetes/ha's, but for the labels and annotations it adds, the
// release in its selectors and the image's tag (its appVersion; the manifests run latest).
func TestChartRendersTheKustomizeManifests(t *testing.T) {
	for _, tc := range []struct{ dir, values string }{
		{"base", ""},
		{"ha", filepath.Join(chartDir, "ci", "ha-values.yaml")},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			rendered, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			chart, base := decodeStrict(t, rendered), kustomize(t, tc.dir)
			for kind, pair := range map[string][2]string{
				"Deployment":          {releaseName, "veil-exporter"},
				"Service":             {releaseName, "veil-exporter"},
				"ConfigMap":           {releaseName + "-config", "veil-exporter-config"},
				"PodDisruptionBudget": {releaseName, "veil-exporter"},
			} {
				c, b := chart[kind][pair[0]], base[kind][pair[1]]
				if (c == nil) != (b == nil) {
					t.Errorf("%s: the chart renders %v, deploy/kubernetes/%s %v", kind, c != nil, tc.dir, b != nil)
					continue
				}
				if c != nil {
					t.Run(kind, func(t *testing.T) { sameObject(t, c, b, loadChart(t).Metadata.AppVersion) })
				}
			}
		})
	}
}

// sameObject compares a chart's object with the manifests' once the differences the chart is
// allowed are checked and taken out.
func sameObject(t *testing.T, chart, base any, appVersion string) {
	t.Helper()
	switch c := chart.(type) {
	case *appsv1.Deployment:
		b := base.(*appsv1.Deployment)
		c.Spec.Selector.MatchLabels = sameSelector(t, "selector", c.Spec.Selector.MatchLabels, b.Spec.Selector.MatchLabels)
		c.Labels, c.Annotations, c.Spec.Template.Labels, c.Spec.Template.Annotations = nil, nil, nil, nil
		b.Labels, b.Annotations, b.Spec.Template.Labels, b.Spec.Template.Annotations = nil, nil, nil, nil
		if ca, ba := c.Spec.Template.Spec.Affinity, b.Spec.Template.Spec.Affinity; ca != nil && ba != nil &&
			ca.PodAntiAffinity != nil && ba.PodAntiAffinity != nil {
			ct, bt := ca.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, ba.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			for i := range min(len(ct), len(bt)) {
				if ct[i].LabelSelector != nil && bt[i].LabelSelector != nil {
					ct[i].LabelSelector.MatchLabels = sameSelector(t, "anti-affinity", ct[i].LabelSelector.MatchLabels, bt[i].LabelSelector.MatchLabels)
				}
			}
		}
		cc, bc := &c.Spec.Template.Spec.Containers[0], &b.Spec.Template.Spec.Containers[0]
		repo, _, _ := strings.Cut(bc.Image, ":")
		if cc.Image != repo+":"+appVersion {
			t.Errorf("chart image %s, want %s:%s", cc.Image, repo, appVersion)
		}
		cc.Image = bc.Image
	case *corev1.Service:
		b := base.(*corev1.Service)
		c.Spec.Selector = sameSelector(t, "selector", c.Spec.Selector, b.Spec.Selector)
		c.Labels, c.Annotations, b.Labels, b.Annotations = nil, nil, nil, nil
	case *policyv1.PodDisruptionBudget:
		b := base.(*policyv1.PodDisruptionBudget)
		c.Spec.Selector.MatchLabels = sameSelector(t, "selector", c.Spec.Selector.MatchLabels, b.Spec.Selector.MatchLabels)
		c.Labels, c.Annotations, b.Labels, b.Annotations = nil, nil, nil, nil
	case *corev1.ConfigMap:
		b := base.(*corev1.ConfigMap)
		// The same configuration, whatever the order of keys and the comments.
		var cc, bc any
		if err := yaml.Unmarshal([]byte(c.Data["config.yaml"]), &cc); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(b.Data["config.yaml"]), &bc); err != nil {
			t.Fatal(err)
		}
		sameJSON(t, cc, bc)
		c.Data, b.Data = nil, nil
		c.Labels, c.Annotations, b.Labels, b.Annotations = nil, nil, nil, nil
	default:
		t.Fatalf("no comparison for %T", chart)
	}
	sameJSON(t, chart, base)
}

// sameJSON fails with both objects when their JSON differs.
func sameJSON(t *testing.T, chart, base any) {
	t.Helper()
	c, err := json.MarshalIndent(chart, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(base, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c, b) {
		t.Errorf("the chart and deploy/kubernetes differ:\n%s", lineDiff("manifests", string(b), "chart", string(c)))
	}
}

// copies are the chart's files that repeat a file of the repository (Helm packs no file from
// outside the chart's directory, and a symbolic link out of it is not packed as its target by
// every Helm version): the repository's is the source, `go test -update` copies it.
var copies = map[string]string{
	"files/veil-exporter.rules.yml": "../../deploy/prometheus/veil-exporter.rules.yml",
}

func TestRulesAndDashboardsAreTheRepositorys(t *testing.T) {
	dashboards, err := filepath.Glob("../../dashboards/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards in ../../dashboards (%v)", err)
	}
	want := maps.Clone(copies)
	for _, d := range dashboards {
		want["files/dashboards/"+filepath.Base(d)] = d
	}
	held, _ := filepath.Glob(filepath.Join(chartDir, "files/dashboards/*.json"))
	for _, h := range held {
		if rel := "files/dashboards/" + filepath.Base(h); want[rel] == "" {
			t.Errorf("the chart holds %s, which is no dashboard of dashboards/ (remove it)", rel)
		}
	}
	for copyPath, source := range want {
		src, err := os.ReadFile(source)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(chartDir, copyPath)
		if *update {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, src) {
			t.Errorf("the chart's %s is not %s (go test -update copies it): %v", copyPath, source, err)
		}
	}
}

func TestPrometheusRuleHoldsTheRulesFile(t *testing.T) {
	rendered, err := render(t, filepath.Join(chartDir, "ci", "monitors-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeStrict(t, rendered)
	rule := one[*monitoringv1.PrometheusRule](t, objs, "PrometheusRule")
	spec, err := json.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../deploy/prometheus/veil-exporter.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(spec, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(src, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("the PrometheusRule's groups are not deploy/prometheus/veil-exporter.rules.yml's")
	}
	if n := len(objs["ConfigMap"]); n != 1+len(copiesOfDashboards(t)) {
		t.Errorf("%d ConfigMaps with dashboards on, want the configuration and one per dashboard", n)
	}
	for name, o := range objs["ConfigMap"] {
		cm := o.(*corev1.ConfigMap)
		if name != releaseName+"-config" && cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap %s has no label grafana_dashboard: \"1\"", name)
		}
	}
}

func copiesOfDashboards(t *testing.T) []string {
	t.Helper()
	d, err := filepath.Glob(filepath.Join(chartDir, "files/dashboards/*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestChartVersionIsTheRepositorysVersion(t *testing.T) {
	v, err := os.ReadFile("../../VERSION")
	if os.IsNotExist(err) {
		t.Skip("no VERSION file")
	}
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(v))
	meta := loadChart(t).Metadata
	if meta.Version != want || meta.AppVersion != want {
		t.Errorf("Chart.yaml: version %s, appVersion %s; VERSION says %s", meta.Version, meta.AppVersion, want)
	}
}
