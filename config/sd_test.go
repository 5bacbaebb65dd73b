package config

import (
	"strings"
	"testing"
)

// TestSDPort: sd.port defaults to node_exporter's 9100, takes any port, and a value that is no
// port is refused with its line.
func TestSDPort(t *testing.T) {
	base := "controllers: [{name: a, url: http://x, token: t}]\nevents: {enabled: false}\n"
	tests := []struct {
		name    string
		yaml    string
		want    int
		wantErr []string
	}{
		{"default", base, 9100, nil},
		{"set", base + "sd: {port: 9182}\n", 9182, nil},
		{"highest", base + "sd: {port: 65535}\n", 65535, nil},
		{"zero", base + "sd:\n  port: 0\n", 0, []string{"line 4", "sd.port", "0 is not a port (1-65535)"}},
		{"negative", base + "sd:\n  port: -1\n", 0, []string{"line 4", "sd.port"}},
		{"too high", base + "sd:\n  port: 65536\n", 0, []string{"line 4", "sd.port", "65536"}},
		{"not a number", base + "sd:\n  port: http\n", 0, []string{"line 4", "sd.port"}},
		{"unknown key", base + "sd:\n  ports: 1\n", 0, []string{"line 4", "ports"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.SD.Port != tt.want {
					t.Errorf("sd.port = %d, want %d", cfg.SD.Port, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted with sd.port %d, want an error", cfg.SD.Port)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
