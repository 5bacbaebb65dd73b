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

// TestSDAllowedNetworks: sd.allowed_networks takes CIDRs and single addresses of either family
// (IPv4-mapped IPv6 read as IPv4), empty by default; anything else is refused with its line.
func TestSDAllowedNetworks(t *testing.T) {
	base := "controllers: [{name: a, url: http://x, token: t}]\nevents: {enabled: false}\n"
	tests := []struct {
		name    string
		yaml    string
		want    []string
		wantErr []string
	}{
		{"default", base, []string{}, nil},
		{"cidrs and an address", base + "sd:\n  allowed_networks: [10.0.0.0/8, 'fd00::/8', 192.168.1.7, '::ffff:172.16.0.0/108']\n",
			[]string{"10.0.0.0/8", "fd00::/8", "192.168.1.7/32", "172.16.0.0/12"}, nil},
		{"host bits masked", base + "sd:\n  allowed_networks: [10.1.2.3/16]\n", []string{"10.1.0.0/16"}, nil},
		{"not a network", base + "sd:\n  allowed_networks:\n    - 10.0.0.0/8\n    - guests\n", nil, []string{"line 6", "sd.allowed_networks[1]", `"guests"`}},
		{"bad length", base + "sd:\n  allowed_networks: [10.0.0.0/33]\n", nil, []string{"sd.allowed_networks[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for _, p := range cfg.SD.Networks() {
					got = append(got, p.String())
				}
				if strings.Join(got, " ") != strings.Join(tt.want, " ") {
					t.Errorf("networks %v, want %v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %v, want an error", cfg.SD.AllowedNetworks)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
