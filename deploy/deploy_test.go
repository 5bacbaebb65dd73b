// Package deploy holds no code: its tests check that the deployment files agree with the
// configuration schema, the alert rules and NATS.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseWithToken validates a config with config.Parse, pointing its token file at a real one
// (the example paths do not exist on the test machine).
func parseWithToken(t *testing.T, data []byte, tokenPath string) *config.Config {
	t.Helper()
	if !bytes.Contains(data, []byte(tokenPath)) {
		t.Fatalf("config does not use token_file %s", tokenPath)
	}
	tok := filepath.Join(t.TempDir(), "prod.token")
	if err := os.WriteFile(tok, []byte("jwt test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(bytes.ReplaceAll(data, []byte(tokenPath), []byte(tok)))
	if err != nil {
		t.Fatalf("config is not valid: %v", err)
	}
	return cfg
}

func TestConfigExampleIsValidAndSetsEveryKeyToItsDefault(t *testing.T) {
	data := readFile(t, "../config.example.yaml")
	cfg := parseWithToken(t, data, "/etc/veil-exporter/prod.token")

	// The example documents the defaults: apart from the controller itself, it must say
	// exactly what an empty config would mean.
	want := config.Default()
	got := *cfg
	got.Controllers = nil
	if !got.NATS.Configured {
		t.Error("the example's nats: section is not seen as configured")
	}
	got.NATS.Configured = false // whether the file has a nats: section, not a setting
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example differs from config.Default():\n got %+v\nwant %+v", got, want)
	}
	if got := cfg.Events.Checkpoint.Dir; got != "/var/lib/veil-exporter" {
		t.Errorf("checkpoint.dir = %q, want /var/lib/veil-exporter", got)
	}

	// Every key is present (spelled out, not left to defaults).
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	collectKeys(&doc, "", keys)
	for _, k := range []string{
		"controllers.name", "controllers.url", "controllers.token_file", "controllers.tls.ca_file",
		"controllers.tls.insecure_skip_verify", "controllers.timeout", "controllers.max_concurrency",
		"controllers.max_requests_per_second",
		"collect.interval", "collect.nodes", "collect.clusters", "collect.datapools", "collect.domains",
		"collect.tasks", "collect.domain_include", "collect.domain_exclude",
		"guest.enabled", "guest.ping_interval", "guest.osinfo_interval", "guest.fsinfo_interval",
		"guest.time_interval", "guest.command_timeout", "guest.concurrency", "guest.fs_types_exclude",
		"guest.stats_interval", "guest.disk_devices_exclude",
		"events.enabled", "events.poll_interval", "events.page_size", "events.order", "events.start",
		"events.checkpoint.store", "events.checkpoint.dir",
		"nats.url", "nats.creds_file", "nats.nkey_file", "nats.user", "nats.password",
		"nats.tls.ca_file", "nats.tls.cert_file", "nats.tls.key_file", "nats.subject_prefix",
		"nats.jetstream.enabled", "nats.jetstream.stream", "nats.jetstream.create_stream",
		"nats.jetstream.duplicate_window", "nats.jetstream.publish_timeout", "nats.jetstream.max_pending",
		"nats.embedded.enabled", "nats.embedded.listen", "nats.embedded.store_dir", "nats.embedded.sync",
	} {
		if !keys[k] {
			t.Errorf("config.example.yaml does not spell out %s", k)
		}
	}
}

// collectKeys records dotted key paths; sequence items share their parent's path.
func collectKeys(n *yaml.Node, prefix string, keys map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			collectKeys(c, prefix, keys)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			keys[k] = true
			collectKeys(n.Content[i+1], k, keys)
		}
	}
}

func TestKubernetesConfigMapHoldsAValidConfigWithKVCheckpoints(t *testing.T) {
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/base/configmap.yaml"), &cm); err != nil {
		t.Fatal(err)
	}
	cfg := parseWithToken(t, []byte(cm.Data["config.yaml"]), "/etc/veil-exporter/tokens/prod.token")
	if cfg.Events.Checkpoint.Store != "nats_kv" {
		t.Errorf("checkpoint store = %q, want nats_kv (pod disks are ephemeral)", cfg.Events.Checkpoint.Store)
	}
}

// TestPrometheusRuleWrapsTheSameRules keeps the Operator copy in step with the rules file
// that promtool tests.
func TestPrometheusRuleWrapsTheSameRules(t *testing.T) {
	var rules struct {
		Groups []any `yaml:"groups"`
	}
	var pr struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Groups []any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/veil-exporter.rules.yml"), &rules); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/base/prometheusrule.yaml"), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || len(rules.Groups) == 0 {
		t.Fatalf("kind %q, %d rule groups", pr.Kind, len(rules.Groups))
	}
	if !reflect.DeepEqual(pr.Spec.Groups, rules.Groups) {
		t.Error("kubernetes/base/prometheusrule.yaml spec.groups differ from prometheus/veil-exporter.rules.yml; copy the groups over")
	}
}

func TestKubernetesManifestsAreNonRootReadOnlyAndListed(t *testing.T) {
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/base/kustomization.yaml"), &kust); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("kubernetes/base/*.yaml")
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(kust.Resources, base) {
			t.Errorf("%s is not listed in kustomization.yaml", base)
		}
	}
	for _, r := range kust.Resources {
		if _, err := os.Stat(filepath.Join("kubernetes", "base", r)); err != nil {
			t.Errorf("kustomization lists %s: %v", r, err)
		}
	}

	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
						RunAsUser    int  `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					Containers []struct {
						Ports []struct {
							ContainerPort int `yaml:"containerPort"`
						} `yaml:"ports"`
						SecurityContext struct {
							ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
							AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						} `yaml:"securityContext"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/base/deployment.yaml"), &dep); err != nil {
		t.Fatal(err)
	}
	ps := dep.Spec.Template.Spec
	if !ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.RunAsUser != 65532 {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot as 65532", ps.SecurityContext)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(ps.Containers))
	}
	c := ps.Containers[0]
	if !c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container securityContext = %+v, want read-only root and no privilege escalation", c.SecurityContext)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9867 {
		t.Errorf("ports = %+v, want 9867", c.Ports)
	}
}

func TestSystemdUnitIsHardened(t *testing.T) {
	unit := string(readFile(t, "systemd/veil-exporter.service"))
	settings := map[string][]string{}
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = append(settings[k], v)
		}
	}
	tests := []struct{ key, want string }{
		{"DynamicUser", "yes"},
		{"StateDirectory", "veil-exporter"},
		{"ProtectSystem", "strict"},
		{"ProtectHome", "yes"},
		{"NoNewPrivileges", "yes"},
		{"PrivateTmp", "yes"},
		{"CapabilityBoundingSet", ""},
		{"RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"},
		{"SystemCallFilter", "@system-service"},
		{"ExecReload", "/bin/kill -HUP $MAINPID"},
		{"LoadCredential", "prod.token:/etc/veil-exporter/prod.token"},
	}
	for _, tt := range tests {
		if !slices.Contains(settings[tt.key], tt.want) {
			t.Errorf("%s = %q, want %q", tt.key, settings[tt.key], tt.want)
		}
	}
	// The credential must be what the config reads, or the service cannot authenticate.
	if !strings.Contains(unit, "token_file: /run/credentials/veil-exporter.service/prod.token") {
		t.Error("the unit does not tell which token_file path the LoadCredential provides")
	}
}

// TestDockerfileTakesThePrebuiltStaticBinary keeps deploy/Dockerfile and `make image` in step:
// the image is FROM scratch around what the Makefile puts into the build context (the image
// itself is built and run by e2e/image_test.go).
func TestDockerfileTakesThePrebuiltStaticBinary(t *testing.T) {
	df := string(readFile(t, "Dockerfile"))
	mk := string(readFile(t, "../Makefile"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FROM scratch$`),
		regexp.MustCompile(`(?m)^COPY ca-certificates\.crt /etc/ssl/certs/ca-certificates\.crt$`),
		regexp.MustCompile(`(?m)^COPY passwd group /etc/$`),
		regexp.MustCompile(`(?m)^COPY veil-exporter /usr/bin/veil-exporter$`),
		regexp.MustCompile(`(?m)^COPY --chown=65532:65532 state /var/lib/veil-exporter$`),
		regexp.MustCompile(`(?m)^USER 65532:65532$`),
		regexp.MustCompile(`(?m)^EXPOSE 9867$`),
		regexp.MustCompile(`(?m)^VOLUME \["/var/lib/veil-exporter"\]$`),
	} {
		if !want.MatchString(df) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`CGO_ENABLED=0 \$\(GO\) build -trimpath -ldflags '\$\(LDFLAGS\)' -o \$\(IMAGE_DIR\)/veil-exporter \./cmd/veil-exporter`),
		regexp.MustCompile(`\$\(IMAGE_DIR\)/ca-certificates\.crt`),
		regexp.MustCompile(`nonroot:x:65532:65532:.*>\$\(IMAGE_DIR\)/passwd`),
		regexp.MustCompile(`>\$\(IMAGE_DIR\)/group`),
		regexp.MustCompile(`mkdir -p \$\(IMAGE_DIR\)/state`),
		regexp.MustCompile(`build -f deploy/Dockerfile -t \$\(IMAGE\) \$\(IMAGE_DIR\)`),
	} {
		if !want.MatchString(mk) {
			t.Errorf("make image lacks %s", want)
		}
	}
}

// TestNATSStreamConfigCreatesADeduplicatingStream creates deploy/nats/stream.json on a real
// JetStream server and checks that a re-published event is stored once.
func TestNATSStreamConfigCreatesADeduplicatingStream(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(readFile(t, "nats/stream.json")))
	dec.DisallowUnknownFields()
	var cfg jetstream.StreamConfig
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("stream.json is not a stream configuration: %v", err)
	}

	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	js := testutil.JetStream(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("creating the stream: %v", err)
	}
	info := stream.CachedInfo().Config
	if info.Name != "VEIL_EVENTS" || !slices.Equal(info.Subjects, []string{"veil.events.>"}) ||
		info.Storage != jetstream.FileStorage || info.Duplicates != time.Hour || !info.AllowAtomicPublish {
		t.Errorf("stream = %s %v %v dup %v atomic %v, want VEIL_EVENTS [veil.events.>] file dup 1h atomic (the forwarder publishes atomic batches)",
			info.Name, info.Subjects, info.Storage, info.Duplicates, info.AllowAtomicPublish)
	}

	// The exporter's subjects are <prefix>.<controller>.<type>.<entity_class>.
	subject := config.Default().NATS.SubjectPrefix + ".prod.info.domain"
	for i, wantDup := range []bool{false, true} {
		ack, err := js.Publish(ctx, subject, []byte(`{"id":"e1"}`), jetstream.WithMsgID("prod.e1"))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate != wantDup {
			t.Errorf("publish %d: duplicate = %v, want %v", i, ack.Duplicate, wantDup)
		}
	}
	si, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", si.State.Msgs)
	}
}

// TestNATSServersSyncLikeTheEmbeddedOne: the NATS servers of the deployment files sync JetStream
// to disk as often as the embedded server does by default, not every two minutes (NATS's
// default), which bounds what a power loss of several of them at once drops.
func TestNATSServersSyncLikeTheEmbeddedOne(t *testing.T) {
	want := config.Default().NATS.Embedded.Sync
	opts, err := server.ProcessConfigFile("nats/nats-server.conf")
	if err != nil {
		t.Fatalf("nats/nats-server.conf: %v", err)
	}
	if !opts.JetStream || opts.StoreDir == "" || opts.Cluster.Name == "" || len(opts.Routes) != 3 {
		t.Errorf("nats-server.conf: jetstream %v in %q, cluster %q with %d routes; want JetStream on a store dir in a cluster of three",
			opts.JetStream, opts.StoreDir, opts.Cluster.Name, len(opts.Routes))
	}
	if opts.SyncAlways != want.Always || opts.SyncInterval != want.Interval {
		t.Errorf("nats-server.conf syncs always=%v every %v, want %v", opts.SyncAlways, opts.SyncInterval, want)
	}

	var v struct {
		Config struct {
			JetStream struct {
				Merge map[string]any `yaml:"merge"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
	}
	if err := yaml.Unmarshal(readFile(t, "kubernetes/ha/nats-values.yaml"), &v); err != nil {
		t.Fatal(err)
	}
	got, _ := v.Config.JetStream.Merge["sync_interval"].(string)
	if s, err := config.ParseDiskSync(got); err != nil || s != want {
		t.Errorf("nats-values.yaml config.jetstream.merge.sync_interval = %q (%v), want %v", got, err, want)
	}
}
