package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// sdGroup is one target group of Prometheus' http_sd format.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

func decodeSD(t *testing.T, body string) []sdGroup {
	t.Helper()
	var gs []sdGroup
	if err := json.Unmarshal([]byte(body), &gs); err != nil {
		t.Fatalf("not http_sd JSON: %v\n%.500s", err, body)
	}
	return gs
}

// expectedSD reads the simulator as the platform's API shows it (and asks each listed guest's
// agent for its OS through the simulator) and returns what /sd/domains must list for it: VMs
// that are on, not templates, with an IPv4 address, sorted by id. It also counts the VMs left
// out for each reason, so a test can prove each reason occurred.
func expectedSD(t *testing.T, sim *veiltest.Server, controller, port string, withOS bool) (want []sdGroup, off, templates, noIP int) {
	t.Helper()
	c, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doms, err := c.Domains(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		switch {
		case d.Template:
			templates++
			continue
		case int(d.UserPowerState) != veil.PowerOn:
			off++
			continue
		case len(d.GuestUtils.IPv4) == 0:
			noIP++
			continue
		}
		l := map[string]string{
			"__meta_veil_controller":  controller,
			"__meta_veil_domain_id":   d.ID,
			"__meta_veil_domain":      d.VerboseName,
			"__meta_veil_node_id":     d.Node.ID,
			"__meta_veil_node":        d.Node.VerboseName,
			"__meta_veil_power_state": "on",
		}
		if d.GuestUtils.Hostname != "" {
			l["__meta_veil_guest_hostname"] = d.GuestUtils.Hostname
		}
		var tags []string
		for _, tg := range d.Tags {
			tags = append(tags, tg.Name)
		}
		if len(tags) > 0 {
			sort.Strings(tags)
			l["__meta_veil_tags"] = "," + strings.Join(tags, ",") + ","
		}
		if withOS && d.GuestUtils.QemuState {
			if os, err := c.GuestOSInfo(ctx, d.ID, 5*time.Second); err == nil {
				l["__meta_veil_os_id"] = os.ID
			}
		}
		want = append(want, sdGroup{Targets: []string{d.GuestUtils.IPv4[0] + ":" + port}, Labels: l})
	}
	sort.Slice(want, func(i, j int) bool {
		return want[i].Labels["__meta_veil_domain_id"] < want[j].Labels["__meta_veil_domain_id"]
	})
	return want, off, templates, noIP
}

func diffSD(got, want []sdGroup) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d groups, want %d", len(got), len(want))
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w sdGroup
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "\n#%d: got  %v\n    want %v", i, g, w)
			break
		}
	}
	return b.String()
}

func writeSDConfig(t *testing.T, dir, body string) string {
	t.Helper()
	f := filepath.Join(dir, "veil.yaml")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSDDomains runs the daemon against two simulators and checks /sd/domains against what the
// platform's API says: exactly the VMs that are on, not templates and report an IPv4 address
// (each other kind occurs and is left out), with every label, os_id once the guest checker
// has it (Windows guests, whose commands the platform refuses, never get one), sorted by
// controller and VM id; ?port= and ?controller= select.
func TestSDDomains(t *testing.T) {
	dir := t.TempDir()
	simA := veiltest.New(veiltest.Options{Seed: 11, Token: testutil.SecretToken, VMs: 60, Nodes: 3})
	defer simA.Close()
	simB := veiltest.New(veiltest.Options{Seed: 12, Token: testutil.SecretToken, VMs: 12, Nodes: 2})
	defer simB.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	// beta is configured first: the order is by name, not by configuration.
	cfgFile := writeSDConfig(t, dir, "controllers:\n"+testutil.ControllerYAML("beta", simB.URL, tok)+testutil.ControllerYAML("alpha", simA.URL, tok)+
		"collect:\n  interval: 1s\n"+
		"guest:\n  ping_interval: 200ms\n  osinfo_interval: 1m\n  fsinfo_interval: 1m\n  time_interval: 1m\n  network_interval: 1m\n"+
		"events:\n  enabled: false\nsd:\n  port: 9182\n")
	d := startDaemon(t, cfgFile)
	d.waitReady(t)

	wantA, off, templates, noIP := expectedSD(t, simA, "alpha", "9182", true)
	if off == 0 || templates == 0 || noIP == 0 || len(wantA) == 0 {
		t.Fatalf("the simulator must have VMs of every kind: %d listed, %d off, %d templates, %d without an address", len(wantA), off, templates, noIP)
	}
	wantB, _, _, _ := expectedSD(t, simB, "beta", "9182", true)
	noOS, twoTags := 0, 0
	for _, g := range wantA {
		if _, ok := g.Labels["__meta_veil_os_id"]; !ok {
			noOS++
		}
		if strings.Count(g.Labels["__meta_veil_tags"], ",") == 3 {
			twoTags++
		}
	}
	if noOS == 0 || noOS == len(wantA) || twoTags == 0 {
		t.Fatalf("the simulator must list guests with and without an os_id (%d without of %d) and with two tags (%d)", noOS, len(wantA), twoTags)
	}

	// Guest checks answer within a few ping intervals; until then os_id is missing.
	var got []sdGroup
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		code, body := d.get(t, "/sd/domains")
		if code != http.StatusOK {
			return fmt.Errorf("status %d: %s", code, body)
		}
		got = decodeSD(t, body)
		if diff := diffSD(got, append(slices.Clone(wantA), wantB...)); diff != "" {
			return fmt.Errorf("%s", diff)
		}
		return nil
	}, "/sd/domains to list the expected guests")

	t.Run("content type", func(t *testing.T) {
		resp, err := http.Get(d.base + "/sd/domains")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
	})

	tests := []struct {
		name     string
		query    string
		wantCode int
		want     []sdGroup
		wantBody string
	}{
		{"one controller", "?controller=alpha", 200, wantA, ""},
		{"the other", "?controller=beta", 200, wantB, ""},
		{"a controller not run here is an empty list", "?controller=gamma", 200, nil, "[]"},
		{"an empty controller name matches none", "?controller=", 200, nil, "[]"},
		{"port", "?port=9100&controller=beta", 200, withPort(wantB, "9100"), ""},
		{"port 1", "?port=1&controller=beta", 200, withPort(wantB, "1"), ""},
		{"port 65535", "?port=65535&controller=beta", 200, withPort(wantB, "65535"), ""},
		{"port 0", "?port=0", 400, nil, `port "0" is not a port number (1-65535)`},
		{"port too high", "?port=65536", 400, nil, `port "65536" is not a port number`},
		{"port not a number", "?port=http", 400, nil, `port "http" is not a port number`},
		{"port empty", "?port=", 400, nil, `port "" is not a port number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := d.get(t, "/sd/domains"+tt.query)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tt.wantCode, body)
			}
			if tt.wantBody != "" {
				if !strings.Contains(body, tt.wantBody) {
					t.Errorf("body %q lacks %q", body, tt.wantBody)
				}
				return
			}
			if diff := diffSD(decodeSD(t, body), tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}

	if code, body := d.do(t, http.MethodPost, "/sd/domains"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /sd/domains = %d %s, want 405", code, body)
	}
}

func withPort(gs []sdGroup, port string) []sdGroup {
	out := make([]sdGroup, len(gs))
	for i, g := range gs {
		host := g.Targets[0][:strings.LastIndexByte(g.Targets[0], ':')]
		out[i] = sdGroup{Targets: []string{host + ":" + port}, Labels: g.Labels}
	}
	return out
}

// TestSDDomainsWaitsForFirstRefresh: before the first inventory refresh /sd/domains answers 503,
// so that Prometheus keeps the targets it had instead of dropping every guest of a restarted
// exporter.
func TestSDDomainsWaitsForFirstRefresh(t *testing.T) {
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 3, Token: testutil.SecretToken, VMs: 4, Latency: time.Hour})
	defer sim.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := writeSDConfig(t, dir, "controllers:\n"+testutil.ControllerYAML("slow", sim.URL, tok)+"    timeout: 1h\n"+
		"collect:\n  interval: 1h\nguest:\n  enabled: false\nevents:\n  enabled: false\n")
	d := startDaemon(t, cfgFile)
	code, body := d.get(t, "/sd/domains")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "controller slow: first inventory refresh not done") {
		t.Errorf("/sd/domains before the first refresh = %d %q, want 503 naming the controller", code, body)
	}
	// Another controller's name is not this one's business: nothing to wait for.
	if code, body := d.get(t, "/sd/domains?controller=other"); code != 200 || body != "[]" {
		t.Errorf("/sd/domains?controller=other = %d %q, want 200 []", code, body)
	}
}

// TestAppendSD: the JSON of the target groups is what encoding/json reads back, with names
// that need escaping, labels present only when known, and IPv6-safe targets.
func TestAppendSD(t *testing.T) {
	a := &veil.Domain{ID: "id-a", VerboseName: `web "1" <&> ünï`, Node: veil.Ref{ID: "n1"}, GuestUtils: veil.GuestUtils{Hostname: "web1\tx"}}
	b := &veil.Domain{ID: "id-b", VerboseName: "db", Node: veil.Ref{ID: "n2"}}
	srcs := []sdSource{
		{controller: "prod", targets: []collector.GuestTarget{
			{Domain: a, IPv4: "10.0.0.1", Node: "node-1", Tags: ",db,prod,"},
			{Domain: b, IPv4: "fe80::1", Node: ""},
		}, osIDs: map[string]string{"id-a": "ubuntu"}},
		{controller: "test"},
	}
	got := decodeSD(t, string(appendSD(nil, srcs, "9100")))
	want := []sdGroup{
		{Targets: []string{"10.0.0.1:9100"}, Labels: map[string]string{
			"__meta_veil_controller": "prod", "__meta_veil_domain_id": "id-a", "__meta_veil_domain": `web "1" <&> ünï`,
			"__meta_veil_node_id": "n1", "__meta_veil_node": "node-1", "__meta_veil_power_state": "on",
			"__meta_veil_guest_hostname": "web1\tx", "__meta_veil_tags": ",db,prod,", "__meta_veil_os_id": "ubuntu",
		}},
		{Targets: []string{"[fe80::1]:9100"}, Labels: map[string]string{
			"__meta_veil_controller": "prod", "__meta_veil_domain_id": "id-b", "__meta_veil_domain": "db",
			"__meta_veil_node_id": "n2", "__meta_veil_node": "", "__meta_veil_power_state": "on",
		}},
	}
	if diff := diffSD(got, want); diff != "" {
		t.Error(diff)
	}
	if s := string(appendSD(nil, nil, "9100")); s != "[]" {
		t.Errorf("no targets = %q, want []", s)
	}
}
