package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// The Kubernetes API schema used here is the OpenAPI document kustomize embeds
// (sigs.k8s.io/kustomize/kyaml/openapi, Kubernetes v1.21.2): it is in the module, so the check
// needs no cluster, no kubectl and no download at test time. A field added to Kubernetes after
// v1.21 would be reported as unknown; none of these manifests uses one.

// operatorKinds are the Prometheus Operator's custom resources: the Kubernetes schema does not
// know them, so only their metadata is checked against it here. TestPrometheusRuleWrapsTheSameRules
// and TestHAScrapesEveryReplica read their specs.
var operatorKinds = map[kyaml.TypeMeta]bool{
	{APIVersion: "monitoring.coreos.com/v1", Kind: "ServiceMonitor"}: true,
	{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"}: true,
}

const (
	objectMetaRef = "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
	quantityRef   = "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"
)

// validateResources checks every rendered object against the Kubernetes API schema, as the
// JSON that kubectl would send: its apiVersion and kind must name a type of the API, every field
// must exist in that type's schema with a value of the right type, and required fields must be
// present. It returns one line per violation.
func validateResources(m resmap.ResMap) []string {
	var out []string
	for _, r := range m.Resources() {
		j, err := r.MarshalJSON()
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", r.CurId(), err))
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber() // integers stay distinguishable from other numbers
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", r.CurId(), err))
			continue
		}
		out = append(out, schemaViolations(o)...)
	}
	return out
}

// schemaViolations checks one object decoded from JSON (numbers as json.Number).
func schemaViolations(o map[string]any) []string {
	tm := kyaml.TypeMeta{}
	tm.APIVersion, _ = o["apiVersion"].(string)
	tm.Kind, _ = o["kind"].(string)
	name, _ := at(o, "metadata", "name").(string)
	path := fmt.Sprintf("%s %s/%s", tm.APIVersion, tm.Kind, name)
	var out []string
	switch rs := openapi.SchemaForResourceType(tm); {
	case rs != nil:
		walkSchema(rs.Schema, o, path, &out)
	case operatorKinds[tm]:
		walkSchema(&spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(objectMetaRef)}}, o["metadata"], path+" metadata", &out)
	default:
		out = append(out, fmt.Sprintf("%s: apiVersion %q kind %q is not a type of the Kubernetes API", path, tm.APIVersion, tm.Kind))
	}
	return out
}

// walkSchema checks v against s, appending a line per violation to out.
func walkSchema(s *spec.Schema, v any, path string, out *[]string) {
	bad := func(format string, args ...any) { *out = append(*out, path+": "+fmt.Sprintf(format, args...)) }
	quantity := false
	for s.Ref.String() != "" {
		quantity = quantity || s.Ref.String() == quantityRef
		r, err := openapi.Resolve(&s.Ref, openapi.Schema())
		if err != nil {
			bad("schema reference %s: %v", s.Ref.String(), err)
			return
		}
		s = r
	}
	if v == nil {
		return // null is the same as absent
	}
	if quantity { // "64Mi" or a plain number
		if _, ok := v.(string); !ok && !isNumber(v) {
			bad("want a quantity, got %s", jsonType(v))
		}
		return
	}
	if len(s.Type) == 0 {
		return // a schema without a type holds anything
	}
	switch typ := s.Type[0]; typ {
	case "object":
		walkObject(s, v, path, out)
	case "array":
		l, ok := v.([]any)
		if !ok {
			bad("want an array, got %s", jsonType(v))
			return
		}
		if s.Items != nil && s.Items.Schema != nil {
			for i, item := range l {
				walkSchema(s.Items.Schema, item, fmt.Sprintf("%s[%d]", path, i), out)
			}
		}
	case "string":
		if _, ok := v.(string); !ok && (s.Format != "int-or-string" || !isInteger(v)) {
			bad("want a string, got %s", jsonType(v))
		}
	case "integer":
		if !isInteger(v) {
			bad("want an integer, got %s", jsonType(v))
		} else if n, _ := v.(json.Number).Int64(); s.Format == "int32" && n != int64(int32(n)) {
			bad("%d is out of the int32 range", n)
		}
	case "number":
		if !isNumber(v) {
			bad("want a number, got %s", jsonType(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %s", jsonType(v))
		}
	default:
		bad("schema type %q not handled", typ)
	}
}

// walkObject checks the object v against s: its required fields, and each field against its
// property's schema or the additional properties'.
func walkObject(s *spec.Schema, v any, path string, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok {
		*out = append(*out, path+": want an object, got "+jsonType(v))
		return
	}
	if len(s.Properties) == 0 && s.AdditionalProperties == nil {
		return // free-form (RawExtension, FieldsV1)
	}
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			*out = append(*out, path+": required field "+r+" is missing")
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "." + k
		if ps, ok := s.Properties[k]; ok {
			walkSchema(&ps, m[k], p, out)
		} else if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
			walkSchema(ap.Schema, m[k], p, out)
		} else if ap == nil || !ap.Allows {
			*out = append(*out, p+": unknown field")
		}
	}
}

func isNumber(v any) bool { _, ok := v.(json.Number); return ok }

func isInteger(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	_, err := n.Int64()
	return err == nil
}

func jsonType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprint("the boolean ", v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// TestRenderedManifestsMatchTheKubernetesSchema: what kubectl apply -k would send for the
// single-replica and the ha manifests is valid for the API server's types.
func TestRenderedManifestsMatchTheKubernetesSchema(t *testing.T) {
	for _, dir := range []string{"kubernetes", "kubernetes/ha"} {
		m := build(t, dir)
		if m.Size() < 7 {
			t.Errorf("%s renders %d objects, want the 7 or more its kustomizations list", dir, m.Size())
		}
		for _, v := range validateResources(m) {
			t.Errorf("%s: %s", dir, v)
		}
		checked := 0
		for _, r := range m.Resources() {
			if openapi.SchemaForResourceType(kyaml.TypeMeta{APIVersion: r.GetApiVersion(), Kind: r.GetKind()}) != nil {
				checked++
			}
		}
		if checked < m.Size()-len(operatorKinds) {
			t.Errorf("%s: %d of %d objects checked against a Kubernetes type", dir, checked, m.Size())
		}
	}
}

// TestSchemaValidationRejectsWrongObjects: the check above can fail. Each object below has one
// mistake kubectl apply would be refused for; a correct Deployment next to them passes.
func TestSchemaValidationRejectsWrongObjects(t *testing.T) {
	objects := map[string]string{
		"good.yaml": deploymentYAML("good", "replicas: 3", ""),
		// a number as a word
		"replicas-string.yaml": deploymentYAML("replicas-string", `replicas: "three"`, ""),
		// a misspelt field, in a spec and in a container inside a list
		"typo.yaml": deploymentYAML("typo", "replica: 3", ""),
		// an integer beyond its int32 field
		"replicas-huge.yaml":  deploymentYAML("replicas-huge", "replicas: 3000000000", ""),
		"container-typo.yaml": deploymentYAML("container-typo", "replicas: 1", "imagePullPolicyy: Always"),
		// a boolean as a string, deep in the pod template
		"bool-string.yaml": deploymentYAML("bool-string", "replicas: 1", "securityContext: {readOnlyRootFilesystem: \"yes\"}"),
		// a required field missing (a container's name)
		"no-name.yaml": strings.Replace(deploymentYAML("no-name", "replicas: 1", ""), "- name: app\n          ", "- ", 1),
		// a label value that is not a string
		"label-number.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: label-number\n  labels: {tier: 1}\n",
		// a kind or an apiVersion the API does not have
		"unknown-kind.yaml":    "apiVersion: apps/v1\nkind: Deploymnet\nmetadata:\n  name: unknown-kind\n",
		"unknown-version.yaml": strings.Replace(deploymentYAML("unknown-version", "replicas: 1", ""), "apps/v1", "apps/v1beta3", 1),
		// an Operator kind is checked for its metadata
		"monitor-meta.yaml": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: monitor-meta\n  lables: {a: b}\nspec: {}\n",
	}
	want := map[string]string{
		"replicas-string": `Deployment/replicas-string.spec.replicas: want an integer, got the string "three"`,
		"typo":            "Deployment/typo.spec.replica: unknown field",
		"replicas-huge":   "Deployment/replicas-huge.spec.replicas: 3000000000 is out of the int32 range",
		"container-typo":  "Deployment/container-typo.spec.template.spec.containers[0].imagePullPolicyy: unknown field",
		"bool-string":     `Deployment/bool-string.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem: want a boolean, got the string "yes"`,
		"no-name":         "Deployment/no-name.spec.template.spec.containers[0]: required field name is missing",
		"label-number":    "ConfigMap/label-number.metadata.labels.tier: want a string, got the number 1",
		"unknown-kind":    `Deploymnet/unknown-kind: apiVersion "apps/v1" kind "Deploymnet" is not a type of the Kubernetes API`,
		"unknown-version": `Deployment/unknown-version: apiVersion "apps/v1beta3" kind "Deployment" is not a type of the Kubernetes API`,
		"monitor-meta":    "ServiceMonitor/monitor-meta metadata.lables: unknown field",
	}

	dir := t.TempDir()
	kust := "resources:\n"
	for f, y := range objects {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		kust += "  - " + f + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
		t.Fatal(err)
	}
	got := validateResources(build(t, dir))
	t.Logf("violations:\n%s", strings.Join(got, "\n"))
	for name, w := range want {
		var lines []string
		for _, g := range got {
			if strings.Contains(g, "/"+name+".") || strings.Contains(g, "/"+name+":") || strings.Contains(g, "/"+name+" ") {
				lines = append(lines, g)
			}
		}
		if len(lines) != 1 || !strings.HasSuffix(lines[0], w) {
			t.Errorf("%s: violations %q, want exactly one ending in %q", name, lines, w)
		}
	}
	for _, g := range got {
		if strings.Contains(g, "/good") {
			t.Errorf("the correct Deployment is refused: %s", g)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}

// deploymentYAML is a small valid Deployment with specLine in its spec and containerLine (if
// any) in its container.
func deploymentYAML(name, specLine, containerLine string) string {
	c := ""
	if containerLine != "" {
		c = "\n          " + containerLine
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  %[2]s
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
        - name: app
          image: example/app:1
          resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: 1}}
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /ready, port: http}}
          livenessProbe: {httpGet: {path: /healthy, port: 8080}}%[3]s
`, name, specLine, c)
}
