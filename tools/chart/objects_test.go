// This file decodes every object the chart renders strictly into its Kubernetes API type (an
// unknown field or a wrong type fails), and checks what each ci case promises: a configuration
// the daemon's own parser accepts, HA mode with 2 or more replicas, the pod's security context.

package chart

import (
	"path"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to the Go type an object of it decodes into.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"v1/Namespace":                            func() any { return &corev1.Namespace{} }, // the kustomize base's
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

// objects is a render decoded: every object by kind, then by name.
type objects map[string]map[string]any

// decodeStrict decodes every document of a render into its API type; an unknown kind, an
// unknown field, a duplicate field or a wrong type fails the test.
func decodeStrict(t *testing.T, render string) objects {
	t.Helper()
	out := objects{}
	for _, doc := range manifests(render) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		newObj := kinds[head.APIVersion+"/"+head.Kind]
		if newObj == nil {
			t.Errorf("%s %s: no API type known for this kind", head.APIVersion, head.Kind)
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s %s does not decode strictly: %v", head.Kind, head.Metadata.Name, err)
			continue
		}
		if out[head.Kind] == nil {
			out[head.Kind] = map[string]any{}
		}
		if out[head.Kind][head.Metadata.Name] != nil {
			t.Errorf("two %s named %s", head.Kind, head.Metadata.Name)
		}
		out[head.Kind][head.Metadata.Name] = obj
	}
	return out
}

// one returns the only object of a kind, failing when there is not exactly one.
func one[T any](t *testing.T, objs objects, kind string) T {
	t.Helper()
	if len(objs[kind]) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(objs[kind]), kind)
	}
	for _, o := range objs[kind] {
		return o.(T)
	}
	panic("unreachable")
}

// mountedPath is a file the configuration names inside the pod's /etc/veil-exporter.
var mountedPath = regexp.MustCompile(`/etc/veil-exporter/[^\s"']+`)

// daemonConfig is what these tests read of the daemon's configuration. The daemon's own parser
// checks the whole of it in deploy/helm_test.go (the daemon's module), from the golden files.
type daemonConfig struct {
	Controllers []struct {
		Name      string `json:"name"`
		TokenFile string `json:"token_file"`
	} `json:"controllers"`
	Events struct {
		Enabled    *bool `json:"enabled"`
		Checkpoint struct {
			Store string `json:"store"`
		} `json:"checkpoint"`
	} `json:"events"`
	HA struct {
		Enabled  bool   `json:"enabled"`
		Instance string `json:"instance"`
	} `json:"ha"`
}

// parseConfig reads the configuration out of the chart's ConfigMap; every file it names under
// /etc/veil-exporter (tokens, CA bundles) must be on a volume the container mounts, and each
// controller reads its token from the Secret's key <name>.token.
func parseConfig(t *testing.T, objs objects) daemonConfig {
	t.Helper()
	cm, ok := objs["ConfigMap"][releaseName+"-config"].(*corev1.ConfigMap)
	if !ok {
		t.Fatalf("no ConfigMap %s-config", releaseName)
	}
	data := cm.Data["config.yaml"]
	dep := one[*appsv1.Deployment](t, objs, "Deployment")
	mounts := map[string]bool{}
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, p := range mountedPath.FindAllString(data, -1) {
		if !mounts[path.Dir(p)] {
			t.Errorf("the configuration names %s, on no volume the container mounts", p)
		}
	}
	var cfg daemonConfig
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, data)
	}
	for _, c := range cfg.Controllers {
		if want := "/etc/veil-exporter/tokens/" + c.Name + ".token"; c.TokenFile != want {
			t.Errorf("controller %s reads its token from %s, not from the Secret's key %s.token", c.Name, c.TokenFile, c.Name)
		}
	}
	return cfg
}

func TestEveryCIRenderDecodesStrictlyWithAConfigTheDaemonAccepts(t *testing.T) {
	for name, file := range ciValues(t) {
		t.Run(name, func(t *testing.T) {
			rendered, err := render(t, file)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeStrict(t, rendered)
			cfg := parseConfig(t, objs)
			dep := one[*appsv1.Deployment](t, objs, "Deployment")
			checkHA(t, objs, dep, cfg)
			checkLockedDown(t, dep)
			checkTokens(t, objs, dep, cfg)
		})
	}
}

// checkHA: 2 or more replicas are HA mode (ha on, each replica named after its pod, a
// PodDisruptionBudget, a headless Service, one pod at a time), 1 is not.
func checkHA(t *testing.T, objs objects, dep *appsv1.Deployment, cfg daemonConfig) {
	t.Helper()
	svc := one[*corev1.Service](t, objs, "Service")
	ha := *dep.Spec.Replicas >= 2
	if cfg.HA.Enabled != ha {
		t.Errorf("replicas %d, ha.enabled %v", *dep.Spec.Replicas, cfg.HA.Enabled)
	}
	if got := len(objs["PodDisruptionBudget"]); got != map[bool]int{true: 1}[ha] {
		t.Errorf("replicas %d, %d PodDisruptionBudgets", *dep.Spec.Replicas, got)
	}
	if (svc.Spec.ClusterIP == corev1.ClusterIPNone) != ha || svc.Spec.PublishNotReadyAddresses != ha {
		t.Errorf("replicas %d, Service clusterIP %q publishNotReadyAddresses %v", *dep.Spec.Replicas,
			svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if !ha {
		if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("one replica, strategy %s: an old and a new pod would poll the controllers at once", dep.Spec.Strategy.Type)
		}
		return
	}
	if cfg.HA.Instance != "${POD_NAME}" {
		t.Errorf("ha.instance = %q, want ${POD_NAME}, the pod's name", cfg.HA.Instance)
	}
	if (cfg.Events.Enabled == nil || *cfg.Events.Enabled) && cfg.Events.Checkpoint.Store != "nats_kv" {
		t.Errorf("HA with checkpoint store %q", cfg.Events.Checkpoint.Store)
	}
	ru := dep.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("HA rolls %+v, want one pod at a time and no surge", ru)
	}
}

// checkLockedDown: non-root, read-only, no capability, seccomp RuntimeDefault, no API token.
func checkLockedDown(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token; the daemon calls no Kubernetes API")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s securityContext %+v: want read-only, no privilege escalation, ALL dropped", c.Name, sc)
		}
	}
}

// checkTokens: the tokens volume is the Secret the chart makes, or the existing one, and it
// holds a key for every controller when the chart makes it.
func checkTokens(t *testing.T, objs objects, dep *appsv1.Deployment, cfg daemonConfig) {
	t.Helper()
	var secretName string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "tokens" && v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	s, made := objs["Secret"][secretName].(*corev1.Secret)
	if !made {
		if len(objs["Secret"]) != 0 {
			t.Errorf("the pod reads tokens from %q, yet the chart makes Secrets %v", secretName, objs["Secret"])
		}
		return
	}
	for _, c := range cfg.Controllers {
		if strings.TrimSpace(s.StringData[c.Name+".token"]) == "" {
			t.Errorf("Secret %s has no token for controller %s", secretName, c.Name)
		}
	}
}
