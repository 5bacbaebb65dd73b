package config

import (
	"strings"
	"testing"
	"time"
)

func TestHADefaults(t *testing.T) {
	cfg, err := Parse([]byte("controllers:\n  - {name: a, url: 'http://x', token: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := HA{Enabled: false, Bucket: "VEIL_EXPORTER_LEASES", LeaseTTL: 15 * time.Second, Instance: "", Replicas: 1}
	if cfg.HA != want {
		t.Errorf("ha = %+v, want %+v", cfg.HA, want)
	}
}

func TestHAAccepted(t *testing.T) {
	base := "controllers:\n  - {name: a, url: 'http://x', token: t}\n"
	for name, yaml := range map[string]string{
		"events in nats_kv": base + "events: {checkpoint: {store: nats_kv}}\nha: {enabled: true, lease_ttl: 3s, instance: pod-1, replicas: 3}\n",
		"events off":        base + "events: {enabled: false}\nha: {enabled: true}\n",
		// A disabled section is not checked: the values only matter once it is switched on.
		"disabled with file store and embedded NATS": base + "nats: {embedded: {enabled: true}}\nha: {lease_ttl: 1s}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(yaml)); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

func TestHARejects(t *testing.T) {
	base := "controllers:\n  - {name: a, url: 'http://x', token: t}\n"
	kv := "events: {checkpoint: {store: nats_kv}}\n"
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"events with file checkpoint", base + "ha: {enabled: true}\n",
			[]string{"line 3", "ha.enabled", "events.checkpoint.store: nats_kv"}},
		{"events without JetStream", base + kv + "nats: {jetstream: {enabled: false}}\nha: {enabled: true}\n",
			[]string{"ha.enabled", "nats.jetstream.enabled: true"}},
		{"embedded NATS", base + kv + "nats: {embedded: {enabled: true}}\nha: {enabled: true}\n",
			[]string{"ha.enabled", "nats.embedded.enabled", "single node", "NATS cluster"}},
		{"embedded NATS without events", base + "events: {enabled: false}\nnats: {embedded: {enabled: true}}\nha: {enabled: true}\n",
			[]string{"nats.embedded.enabled"}},
		{"short lease", base + kv + "ha:\n  enabled: true\n  lease_ttl: 2s\n",
			[]string{"line 6", "ha.lease_ttl", "at least 3s"}},
		{"bad bucket", base + kv + "ha: {enabled: true, bucket: 'a.b'}\n", []string{"ha.bucket"}},
		{"bad instance", base + kv + "ha: {enabled: true, instance: 'pod 1'}\n", []string{"ha.instance"}},
		{"replicas", base + kv + "ha: {enabled: true, replicas: 7}\n", []string{"ha.replicas", "1..5"}},
		{"NATS checked without events", base + "events: {enabled: false}\nnats: {url: bogus}\nha: {enabled: true}\n",
			[]string{"nats.url"}},
		{"unknown key", base + kv + "ha: {enabled: true, leader: x}\n", []string{"leader"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
