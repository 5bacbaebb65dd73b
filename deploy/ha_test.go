package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/veil-exporter/veil-exporter/config"
)

// obj is one Kubernetes object as generic YAML.
type obj = map[string]any

// decodeAll reads every document of a multi-document YAML stream.
func decodeAll(t *testing.T, data []byte) []obj {
	t.Helper()
	var out []obj
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o obj
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// at walks o along keys; nil when a step is missing.
func at(o any, keys ...string) any {
	for _, k := range keys {
		m, ok := o.(obj)
		if !ok {
			return nil
		}
		o = m[k]
	}
	return o
}

func str(o any, keys ...string) string { s, _ := at(o, keys...).(string); return s }
func num(o any, keys ...string) int    { n, _ := at(o, keys...).(int); return n }

func strMap(o any) map[string]string {
	m, _ := o.(obj)
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// selects says whether matchLabels sel picks an object labelled labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// kustomizationOf reads dir/kustomization.yaml as kustomize does (unknown fields refused).
func kustomizationOf(t *testing.T, dir string) *types.Kustomization {
	t.Helper()
	var k types.Kustomization
	if err := k.Unmarshal(readFile(t, filepath.Join(dir, "kustomization.yaml"))); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return &k
}

// build runs kustomize on dir with the library kubectl apply -k embeds.
func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

// render returns the objects kustomize renders for dir, each checked against the Kubernetes API
// schema (validateResources).
func render(t *testing.T, dir string) []obj {
	t.Helper()
	m := build(t, dir)
	for _, v := range validateResources(m) {
		t.Errorf("%s: %s", dir, v)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decodeAll(t, y)
}

func find(t *testing.T, objs []obj, kind, name string) obj {
	t.Helper()
	for _, o := range objs {
		if str(o, "kind") == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s named %s", kind, name)
	return nil
}

// haConfig parses the ConfigMap of the ha overlay as the pod named podName would.
func haConfig(t *testing.T, objs []obj, podName string) *config.Config {
	t.Helper()
	t.Setenv("POD_NAME", podName)
	cm := find(t, objs, "ConfigMap", "veil-exporter-config")
	return parseWithToken(t, []byte(str(cm, "data", "config.yaml")), "/etc/veil-exporter/tokens/prod.token")
}

func TestKubernetesYAMLParsesAsObjects(t *testing.T) {
	var files []string
	err := filepath.WalkDir("kubernetes", func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".yaml") {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) < 12 {
		t.Fatalf("found %d YAML files (%v), want the base, the ha overlay and the NATS values", len(files), err)
	}
	for _, f := range files {
		docs := decodeAll(t, readFile(t, f))
		if len(docs) == 0 {
			t.Errorf("%s holds no document", f)
		}
		if filepath.Base(f) == "nats-values.yaml" {
			continue // Helm values, not an object
		}
		for _, d := range docs {
			if str(d, "apiVersion") == "" || str(d, "kind") == "" {
				t.Errorf("%s: a document without apiVersion or kind", f)
			}
		}
	}
}

// TestKustomizationsListEveryFile: a manifest left out of its kustomization is never applied.
func TestKustomizationsListEveryFile(t *testing.T) {
	notResources := map[string]bool{"kustomization.yaml": true, "nats-values.yaml": true}
	for _, dir := range []string{"kubernetes", "kubernetes/base", "kubernetes/ha"} {
		k := kustomizationOf(t, dir)
		listed := slices.Clone(k.Resources)
		for _, p := range k.Patches {
			listed = append(listed, p.Path)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if base := filepath.Base(f); !notResources[base] && !slices.Contains(listed, base) {
				t.Errorf("%s/%s is not listed in its kustomization.yaml", dir, base)
			}
		}
		for _, r := range listed {
			if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
				t.Errorf("%s/kustomization.yaml lists %s: %v", dir, r, err)
			}
		}
	}
	if k := kustomizationOf(t, "kubernetes/ha"); !slices.Contains(k.Resources, "../base") {
		t.Errorf("the ha overlay's resources are %v, want ../base among them", k.Resources)
	}
}

func TestSingleReplicaRenderIsUnchangedByTheOverlay(t *testing.T) {
	dep := find(t, render(t, "kubernetes"), "Deployment", "veil-exporter")
	if n := num(dep, "spec", "replicas"); n != 1 {
		t.Errorf("deploy/kubernetes renders %d replicas, want 1", n)
	}
	if s := str(dep, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("deploy/kubernetes strategy = %q, want Recreate (one replica must not overlap its successor)", s)
	}
}

func TestHAConfigMapLoadsWithHAOnAndNamesThePod(t *testing.T) {
	objs := render(t, "kubernetes/ha")
	// The longest name a Deployment gives a pod: 58 characters of prefix, 5 random.
	pod := "veil-exporter-5d8f7c9b4-x2k9p"
	cfg := haConfig(t, objs, pod)
	h := cfg.HA
	if !h.Enabled || h.Instance != pod || h.Replicas != 3 || h.LeaseTTL < config.MinLeaseTTL || h.Bucket == "" {
		t.Errorf("ha = %+v, want enabled, instance %s, 3 bucket replicas", h, pod)
	}
	if cfg.Events.Checkpoint.Store != "nats_kv" || !cfg.Events.Enabled {
		t.Errorf("events enabled %v with checkpoint store %q, want nats_kv", cfg.Events.Enabled, cfg.Events.Checkpoint.Store)
	}
	if cfg.NATS.Embedded.Enabled || cfg.NATS.URL != "nats://nats.nats.svc:4222" {
		t.Errorf("nats url %q (embedded %v), want the Helm release's nats://nats.nats.svc:4222", cfg.NATS.URL, cfg.NATS.Embedded.Enabled)
	}
	if cfg.NATS.JetStream.CreateStream {
		t.Error("create_stream is true: the exporter would create a one-replica stream; create it from nats/stream-ha.json")
	}

	// Apart from ha and create_stream, replicas run what one exporter runs.
	single := func() config.Config {
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(readFile(t, "kubernetes/base/configmap.yaml"), &cm); err != nil {
			t.Fatal(err)
		}
		return *parseWithToken(t, []byte(cm.Data["config.yaml"]), "/etc/veil-exporter/tokens/prod.token")
	}()
	ha := *cfg
	ha.HA, ha.NATS.JetStream.CreateStream = single.HA, single.NATS.JetStream.CreateStream
	ha.Controllers, single.Controllers = nil, nil // token paths differ (temporary files)
	if !reflect.DeepEqual(ha, single) {
		t.Errorf("the ha ConfigMap differs from the base one beyond ha and create_stream:\n  ha %+v\nbase %+v", ha, single)
	}

	// The instance really comes from the environment: without POD_NAME the file is refused.
	os.Unsetenv("POD_NAME")
	if _, err := config.Parse([]byte(str(find(t, objs, "ConfigMap", "veil-exporter-config"), "data", "config.yaml"))); err == nil || !strings.Contains(err.Error(), "POD_NAME") {
		t.Errorf("config without POD_NAME: err = %v, want one naming POD_NAME", err)
	}
}

func TestHADeploymentRunsThreeReplicasOnThreeNodes(t *testing.T) {
	objs := render(t, "kubernetes/ha")
	cfg := haConfig(t, objs, "veil-exporter-0")
	dep := find(t, objs, "Deployment", "veil-exporter")
	podLabels := strMap(at(dep, "spec", "template", "metadata", "labels"))
	if !selects(strMap(at(dep, "spec", "selector", "matchLabels")), podLabels) {
		t.Fatalf("the Deployment's selector does not select its pods %v", podLabels)
	}
	replicas := num(dep, "spec", "replicas")
	if replicas < 3 {
		t.Errorf("replicas = %d, want at least 3", replicas)
	}

	spec := at(dep, "spec", "template", "spec")
	terms, _ := at(spec, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution").([]any)
	if len(terms) != 1 || str(terms[0], "topologyKey") != "kubernetes.io/hostname" ||
		!selects(strMap(at(terms[0], "labelSelector", "matchLabels")), podLabels) {
		t.Errorf("pod anti-affinity = %v, want one required term on kubernetes.io/hostname selecting the replicas", terms)
	}
	// With one replica per node required, a surge pod has no node on a cluster of `replicas` nodes.
	if s := at(dep, "spec", "strategy"); str(s, "type") != "RollingUpdate" || num(s, "rollingUpdate", "maxSurge") != 0 || num(s, "rollingUpdate", "maxUnavailable") != 1 {
		t.Errorf("strategy = %v, want RollingUpdate with maxSurge 0 and maxUnavailable 1", s)
	}

	// SIGTERM: release leases, await publish acks, save the position, shut HTTP down (5s).
	grace := time.Duration(num(spec, "terminationGracePeriodSeconds")) * time.Second
	if need := cfg.NATS.JetStream.PublishTimeout + 5*time.Second + 10*time.Second; grace < need {
		t.Errorf("terminationGracePeriodSeconds = %v, want at least %v (publish_timeout + HTTP shutdown + margin)", grace, need)
	}

	containers, _ := at(spec, "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	env, _ := at(c, "env").([]any)
	if !slices.ContainsFunc(env, func(e any) bool {
		return str(e, "name") == "POD_NAME" && str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name"
	}) {
		t.Errorf("env = %v, want POD_NAME from the downward API (metadata.name)", env)
	}

	// Probes: the paths the daemon serves, on the container's metrics port.
	src := string(readFile(t, "../internal/web/handler.go"))
	ports, _ := at(c, "ports").([]any)
	for probe, path := range map[string]string{"livenessProbe": "/-/healthy", "readinessProbe": "/-/ready"} {
		get := at(c, probe, "httpGet")
		if str(get, "path") != path {
			t.Errorf("%s path = %q, want %s", probe, str(get, "path"), path)
		}
		if !strings.Contains(src, fmt.Sprintf("HandleFunc(%q", str(get, "path"))) {
			t.Errorf("%s: the daemon serves no %q (internal/web/handler.go)", probe, str(get, "path"))
		}
		if port := str(get, "port"); !slices.ContainsFunc(ports, func(p any) bool { return str(p, "name") == port }) {
			t.Errorf("%s port %q is not a container port (%v)", probe, port, ports)
		}
	}
}

func TestHAPodDisruptionBudgetCoversTheReplicas(t *testing.T) {
	objs := render(t, "kubernetes/ha")
	dep := find(t, objs, "Deployment", "veil-exporter")
	pdb := find(t, objs, "PodDisruptionBudget", "veil-exporter")
	if str(pdb, "apiVersion") != "policy/v1" || num(pdb, "spec", "maxUnavailable") != 1 {
		t.Errorf("PDB %s maxUnavailable %v, want policy/v1 and 1", str(pdb, "apiVersion"), at(pdb, "spec", "maxUnavailable"))
	}
	if !selects(strMap(at(pdb, "spec", "selector", "matchLabels")), strMap(at(dep, "spec", "template", "metadata", "labels"))) {
		t.Errorf("PDB selector %v does not select the pods", at(pdb, "spec", "selector"))
	}
	if str(pdb, "metadata", "namespace") != str(dep, "metadata", "namespace") {
		t.Errorf("PDB in namespace %q, pods in %q", str(pdb, "metadata", "namespace"), str(dep, "metadata", "namespace"))
	}
}

// TestHAScrapesEveryReplica: each replica exports only what it owns, so the union is complete
// only if Prometheus scrapes every pod, ready or not, under the job the alert rules select.
func TestHAScrapesEveryReplica(t *testing.T) {
	objs := render(t, "kubernetes/ha")
	dep := find(t, objs, "Deployment", "veil-exporter")
	svc := find(t, objs, "Service", "veil-exporter") // its name is the job label: job="veil-exporter"
	sm := find(t, objs, "ServiceMonitor", "veil-exporter")

	if str(svc, "spec", "clusterIP") != "None" || at(svc, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service clusterIP %q publishNotReadyAddresses %v, want headless and true", str(svc, "spec", "clusterIP"), at(svc, "spec", "publishNotReadyAddresses"))
	}
	if !selects(strMap(at(svc, "spec", "selector")), strMap(at(dep, "spec", "template", "metadata", "labels"))) {
		t.Errorf("Service selector %v does not select the pods", at(svc, "spec", "selector"))
	}
	if !selects(strMap(at(sm, "spec", "selector", "matchLabels")), strMap(at(svc, "metadata", "labels"))) {
		t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", at(sm, "spec", "selector"), at(svc, "metadata", "labels"))
	}
	if ns := at(sm, "spec", "namespaceSelector"); ns != nil && str(sm, "metadata", "namespace") != str(svc, "metadata", "namespace") {
		t.Errorf("ServiceMonitor in %q with namespaceSelector %v", str(sm, "metadata", "namespace"), ns)
	}
	svcPorts, _ := at(svc, "spec", "ports").([]any)
	containers, _ := at(dep, "spec", "template", "spec", "containers").([]any)
	cPorts, _ := at(containers[0], "ports").([]any)
	endpoints, _ := at(sm, "spec", "endpoints").([]any)
	if len(endpoints) != 1 || str(endpoints[0], "path") != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints = %v, want one on /metrics", endpoints)
	}
	i := slices.IndexFunc(svcPorts, func(p any) bool { return str(p, "name") == str(endpoints[0], "port") })
	if i < 0 {
		t.Fatalf("ServiceMonitor port %q is not a Service port (%v)", str(endpoints[0], "port"), svcPorts)
	}
	if target := str(svcPorts[i], "targetPort"); !slices.ContainsFunc(cPorts, func(p any) bool { return str(p, "name") == target }) {
		t.Errorf("Service targetPort %q is not a container port (%v)", target, cPorts)
	}
}

func TestNATSValuesFormAJetStreamClusterForTheBuckets(t *testing.T) {
	var v struct {
		Config struct {
			Cluster struct {
				Enabled  bool `yaml:"enabled"`
				Replicas int  `yaml:"replicas"`
			} `yaml:"cluster"`
			JetStream struct {
				Enabled   bool `yaml:"enabled"`
				FileStore struct {
					Enabled bool `yaml:"enabled"`
					PVC     struct {
						Enabled bool   `yaml:"enabled"`
						Size    string `yaml:"size"`
					} `yaml:"pvc"`
				} `yaml:"fileStore"`
				MemoryStore struct {
					Enabled bool `yaml:"enabled"`
				} `yaml:"memoryStore"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
		FullnameOverride string `yaml:"fullnameOverride"`
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/ha/nats-values.yaml"), &v); err != nil {
		t.Fatal(err)
	}
	c := v.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas < 3 {
		t.Errorf("cluster enabled %v with %d servers, want a cluster of at least 3", c.Cluster.Enabled, c.Cluster.Replicas)
	}
	if !c.JetStream.Enabled || !c.JetStream.FileStore.Enabled || !c.JetStream.FileStore.PVC.Enabled || c.JetStream.FileStore.PVC.Size == "" || c.JetStream.MemoryStore.Enabled {
		t.Errorf("jetstream = %+v, want file storage on a persistent volume and no memory store", c.JetStream)
	}
	if v.FullnameOverride != "" {
		t.Errorf("fullnameOverride %q renames the client Service the ConfigMap connects to", v.FullnameOverride)
	}
	// Replicas of a bucket or stream cannot exceed the servers that hold them.
	cfg := haConfig(t, render(t, "kubernetes/ha"), "veil-exporter-0")
	var stream jetstream.StreamConfig
	if err := json.Unmarshal(readFile(t, "nats/stream-ha.json"), &stream); err != nil {
		t.Fatal(err)
	}
	if cfg.HA.Replicas > c.Cluster.Replicas || stream.Replicas > c.Cluster.Replicas {
		t.Errorf("lease bucket %d and stream %d replicas on %d servers", cfg.HA.Replicas, stream.Replicas, c.Cluster.Replicas)
	}
}

// TestHAStreamIsTheStreamWithThreeReplicas keeps nats/stream-ha.json in step with stream.json.
func TestHAStreamIsTheStreamWithThreeReplicas(t *testing.T) {
	var one, three jetstream.StreamConfig
	for _, s := range []struct {
		path string
		into *jetstream.StreamConfig
	}{{"nats/stream.json", &one}, {"nats/stream-ha.json", &three}} {
		dec := json.NewDecoder(bytes.NewReader(readFile(t, s.path)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(s.into); err != nil {
			t.Fatalf("%s: %v", s.path, err)
		}
	}
	if three.Replicas != 3 {
		t.Errorf("stream-ha.json num_replicas = %d, want 3", three.Replicas)
	}
	three.Replicas = one.Replicas
	if !reflect.DeepEqual(one, three) {
		t.Errorf("stream-ha.json differs from stream.json in more than num_replicas:\n%+v\n%+v", three, one)
	}
}

// TestSystemdHAConfigRunsReplicasOnANATSCluster: the config every host shares loads with ha on
// and names each host differently; the drop-in keeps the unit's stop budget.
func TestSystemdHAConfigRunsReplicasOnANATSCluster(t *testing.T) {
	cfg := parseWithToken(t, readFile(t, "systemd/config-ha.yaml"), "/run/credentials/veil-exporter.service/prod.token")
	if !cfg.HA.Enabled || cfg.HA.Instance != "" || cfg.HA.Replicas != 3 || cfg.Events.Checkpoint.Store != "nats_kv" {
		t.Errorf("ha %+v, checkpoint store %q: want ha on, instance empty (hostname-pid), 3 bucket replicas, nats_kv",
			cfg.HA, cfg.Events.Checkpoint.Store)
	}
	if servers := strings.Split(cfg.NATS.URL, ","); len(servers) < 3 || cfg.NATS.Embedded.Enabled {
		t.Errorf("nats.url %q (embedded %v), want the three servers of a cluster", cfg.NATS.URL, cfg.NATS.Embedded.Enabled)
	}
	if cfg.NATS.JetStream.CreateStream {
		t.Error("create_stream is true: the exporter would create a one-replica stream")
	}

	dropIn := string(readFile(t, "systemd/veil-exporter-ha.conf"))
	settings := map[string]string{}
	section := ""
	for _, line := range strings.Split(dropIn, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
		} else if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[section+k] = v
		}
	}
	for key, want := range map[string]string{
		"[Unit]After":             "nats-server.service",
		"[Service]Restart":        "always",
		"[Service]TimeoutStopSec": "30s",
	} {
		if settings[key] != want {
			t.Errorf("drop-in %s = %q, want %q", key, settings[key], want)
		}
	}
	if !strings.Contains(dropIn, "/etc/systemd/system/veil-exporter.service.d/") {
		t.Error("the drop-in does not say where it goes")
	}
	// The stop budget covers what a stopping replica waits for before its leases are gone.
	stop, err := time.ParseDuration(settings["[Service]TimeoutStopSec"])
	if err != nil || stop < cfg.NATS.JetStream.PublishTimeout+5*time.Second+10*time.Second {
		t.Errorf("TimeoutStopSec %v (%v): want at least publish_timeout + HTTP shutdown + margin", stop, err)
	}
}
