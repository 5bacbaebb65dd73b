package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestServiceDiscoveryOfGuests: a real Prometheus configured with http_sd_configs on the
// exporter's /sd/domains discovers exactly the guests that are on and report an IPv4 address,
// with their __meta_veil_* labels (os_id once the guest checker has it). The job relabels
// __address__ to a closed port on loopback: the guests' addresses are never contacted.
func TestServiceDiscoveryOfGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	promBin := need(t, "prometheus")
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 21, VMs: 30, Nodes: 3})
	defer sim.Close()
	exporter := testutil.Build(t, "cmd/veil-exporter")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(sim.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	webAddr, promAddr, nowhere := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`controllers:
  - name: e2e
    url: %s
    token_file: %s
collect: {interval: 1s}
guest: {ping_interval: 200ms, osinfo_interval: 1m}
events: {enabled: false}
sd: {port: 9182}
`, sim.URL, tokenFile)
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, dir, exporter, "--config.file", cfgFile, "--web.listen-address", webAddr)
	testutil.WaitHTTP(t, "http://"+webAddr+"/-/ready", 30*time.Second)

	want := wantTargets(t, sim)

	promCfg := fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
  - job_name: guests
    http_sd_configs:
      - url: %q
        refresh_interval: 1s
    relabel_configs:
      # Keep the guest's address as instance, then scrape loopback only: tests never send
      # traffic to the guests' addresses.
      - source_labels: [__address__]
        target_label: instance
      - target_label: __address__
        replacement: %q
`, "http://"+webAddr+"/sd/domains", nowhere)
	promCfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfgFile, []byte(promCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, dir, promBin, "--config.file="+promCfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	promURL := "http://" + promAddr
	testutil.WaitHTTP(t, promURL+"/-/ready", 30*time.Second)

	var active []sdTarget
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		var err error
		if active, err = activeTargets(t, promURL); err != nil {
			return err
		}
		return sameTargets(active, want)
	}, "Prometheus to discover exactly the expected guests")
	for _, tg := range active {
		u, err := url.Parse(tg.ScrapeURL)
		if err != nil || u.Host != nowhere {
			t.Errorf("target %s is scraped at %s, want %s (loopback)", tg.Labels["instance"], tg.ScrapeURL, nowhere)
		}
		if want[tg.Labels["instance"]] == nil {
			t.Errorf("target instance %q is not a guest's address", tg.Labels["instance"])
		}
	}
}

// wantTargets are the targets of the guests as the platform's API tells them (read from the
// simulator, on loopback): guest address -> __address__ and __meta_veil_* labels.
func wantTargets(t *testing.T, sim *veiltest.Server) map[string]map[string]string {
	t.Helper()
	want := map[string]map[string]string{} // guest address -> __address__ and __meta_veil_* labels
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
	withOS := 0
	for _, d := range doms {
		if d.Template || int(d.UserPowerState) != veil.PowerOn || len(d.GuestUtils.IPv4) == 0 {
			continue
		}
		addr := d.GuestUtils.IPv4[0] + ":9182"
		l := map[string]string{
			"__address__": addr, "__meta_veil_controller": "e2e", "__meta_veil_domain_id": d.ID,
			"__meta_veil_domain": d.VerboseName, "__meta_veil_node_id": d.Node.ID, "__meta_veil_node": d.Node.VerboseName,
			"__meta_veil_power_state": "on", "__meta_veil_guest_hostname": d.GuestUtils.Hostname,
		}
		var tags []string
		for _, tg := range d.Tags {
			tags = append(tags, tg.Name)
		}
		if len(tags) > 0 {
			sort.Strings(tags)
			l["__meta_veil_tags"] = "," + strings.Join(tags, ",") + ","
		}
		if d.GuestUtils.QemuState {
			if osInfo, err := c.GuestOSInfo(ctx, d.ID, 5*time.Second); err == nil {
				l["__meta_veil_os_id"] = osInfo.ID
				withOS++
			}
		}
		want[addr] = l
	}
	if len(want) == 0 || len(want) == len(doms) || withOS == 0 {
		t.Fatalf("the simulator must have guests listed (%d, %d with an os_id) and VMs left out (of %d)", len(want), withOS, len(doms))
	}
	return want
}

// sdTarget is an active target of Prometheus.
type sdTarget struct {
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapeURL        string            `json:"scrapeUrl"`
}

// activeTargets are the active targets of the Prometheus server at promURL.
func activeTargets(t *testing.T, promURL string) ([]sdTarget, error) {
	var r struct {
		Data struct {
			ActiveTargets []sdTarget `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, promURL+"/api/v1/targets?state=active"), &r); err != nil {
		return nil, err
	}
	return r.Data.ActiveTargets, nil
}

// sameTargets says how the active targets differ from want (guest address -> __address__ and
// __meta_veil_* labels), nil when they do not.
func sameTargets(active []sdTarget, want map[string]map[string]string) error {
	got := map[string]map[string]string{}
	for _, tg := range active {
		// The discovered __address__ is read from instance, which the first rule copied from
		// it: Prometheus 2.42 sometimes shows a target's discoveredLabels after relabelling.
		l := map[string]string{"__address__": tg.Labels["instance"]}
		for k, v := range tg.DiscoveredLabels {
			if strings.HasPrefix(k, "__meta_veil_") {
				l[k] = v
			}
		}
		got[l["__address__"]] = l
	}
	if len(active) != len(got) || !reflect.DeepEqual(got, want) {
		for a, g := range got {
			if want[a] == nil {
				return fmt.Errorf("%d active targets, want %d; unexpected %s: %v", len(active), len(want), a, g)
			}
		}
		for a, w := range want {
			if !reflect.DeepEqual(got[a], w) {
				return fmt.Errorf("%d active targets, want %d; %s: got %v, want %v", len(active), len(want), a, got[a], w)
			}
		}
		return fmt.Errorf("%d active targets, want %d; got %v", len(active), len(want), got)
	}
	return nil
}
