package daemon

import (
	"context"
	"encoding/json"
	"errors"
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
	if reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0 {
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
	d, wantA, wantB := startSDPair(t)

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

// startSDPair runs TestSDDomains' daemon, alpha and beta with guest checks and sd.port 9182,
// until /sd/domains lists what the simulators say (os_id included), and returns that.
func startSDPair(t *testing.T) (d *daemonUnderTest, wantA, wantB []sdGroup) {
	t.Helper()
	dir := t.TempDir()
	simA := veiltest.New(veiltest.Options{Seed: 11, Token: testutil.SecretToken, VMs: 60, Nodes: 3})
	t.Cleanup(simA.Close)
	simB := veiltest.New(veiltest.Options{Seed: 12, Token: testutil.SecretToken, VMs: 12, Nodes: 2})
	t.Cleanup(simB.Close)
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	// beta is configured first: the order is by name, not by configuration.
	cfgFile := writeSDConfig(t, dir, "controllers:\n"+testutil.ControllerYAML("beta", simB.URL, tok)+testutil.ControllerYAML("alpha", simA.URL, tok)+
		"collect:\n  interval: 1s\n"+
		"guest:\n  ping_interval: 200ms\n  osinfo_interval: 1m\n  fsinfo_interval: 1m\n  time_interval: 1m\n  network_interval: 1m\n"+
		"events:\n  enabled: false\nsd:\n  port: 9182\n")
	d = startDaemon(t, cfgFile)
	d.waitReady(t)

	wantA, off, templates, noIP := expectedSD(t, simA, "alpha", "9182", true)
	if off == 0 || templates == 0 || noIP == 0 || len(wantA) == 0 {
		t.Fatalf("the simulator must have VMs of every kind: %d listed, %d off, %d templates, %d without an address", len(wantA), off, templates, noIP)
	}
	wantB, _, _, _ = expectedSD(t, simB, "beta", "9182", true)
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
	return d, wantA, wantB
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

// TestSDDomainsFiltersFamiliesAndPortTags runs the daemon against the simulator with VMs tagged
// and guests given IPv6 addresses, and checks over HTTP: port tags override ?port= (two tags, two
// targets; a tag that is no port is ignored), ?family=ipv6 lists exactly the guests with a global
// IPv6 address (never a link-local one), ?family=any labels the family, ?tag= (all of them),
// ?node= (id or name, any of them) and ?os_id= select on the server, and unknown values give [].
func TestSDDomainsFiltersFamiliesAndPortTags(t *testing.T) {
	r := newFilterRig(t)
	r.portsAndFamilies(t)
	r.filters(t)
	for _, q := range []string{"?family=ipv5", "?family=", "?family=IPv6"} {
		if code, body := r.d.get(t, "/sd/domains"+q); code != http.StatusBadRequest || !strings.Contains(body, "is not ipv4, ipv6 or any") {
			t.Errorf("%s = %d %q, want 400", q, code, body)
		}
	}
}

// filterRig is TestSDDomainsFiltersFamiliesAndPortTags' daemon on one simulator, with five
// guests the checker has reached given tags and IPv6 addresses: checked[0] one port tag; [1]
// two, and the tag web; [2] a tag that is no port, web and prod; [3] a global IPv6 address
// besides a link-local one; [4] only link-local ones.
type filterRig struct {
	d             *daemonUnderTest
	sim           *veiltest.Server
	base, checked []sdGroup
	byID          map[string]sdGroup // the answer to ?port=9300 once the tags are seen
}

func sdID(g sdGroup) string   { return g.Labels["__meta_veil_domain_id"] }
func sdHost(g sdGroup) string { return g.Targets[0][:strings.LastIndexByte(g.Targets[0], ':')] }

// sd is the answer to /sd/domains with query.
func (r *filterRig) sd(t *testing.T, query string) []sdGroup {
	t.Helper()
	code, body := r.d.get(t, "/sd/domains"+query)
	if code != http.StatusOK {
		t.Fatalf("/sd/domains%s: status %d: %s", query, code, body)
	}
	return decodeSD(t, body)
}

func newFilterRig(t *testing.T) *filterRig {
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 21, Token: testutil.SecretToken, VMs: 30, Nodes: 3})
	t.Cleanup(sim.Close)
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := writeSDConfig(t, dir, "controllers:\n"+testutil.ControllerYAML("prod", sim.URL, tok)+
		"collect:\n  interval: 1s\n"+
		"guest:\n  ping_interval: 200ms\n  osinfo_interval: 1m\n  fsinfo_interval: 1m\n  time_interval: 1m\n  network_interval: 200ms\n"+
		"events:\n  enabled: false\n")
	r := &filterRig{d: startDaemon(t, cfgFile), sim: sim}
	r.d.waitReady(t)
	// The guests the checker has reached (they have an os_id) are the ones whose interfaces it reads.
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		r.base, r.checked = r.sd(t, ""), nil
		for _, g := range r.base {
			if g.Labels["__meta_veil_os_id"] != "" {
				r.checked = append(r.checked, g)
			}
		}
		if len(r.checked) < 5 {
			return fmt.Errorf("%d of %d guests with an os_id", len(r.checked), len(r.base))
		}
		return nil
	}, "five guests with an os_id")
	r.tag(t)
	return r
}

// tag gives the checked guests their tags and addresses and waits until the answers show them.
func (r *filterRig) tag(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := r.checked
	must(r.sim.SetTags(sdID(c[0]), "port:9182"))
	must(r.sim.SetTags(sdID(c[1]), "port:9100", "web", "port:8080"))
	must(r.sim.SetTags(sdID(c[2]), "port:http", "port:0", "prod", "web"))
	must(r.sim.SetGuestIPv6(sdID(c[3]), "fe80::1:2", "2001:db8::3"))
	must(r.sim.SetGuestIPv6(sdID(c[4]), "fe80::4"))
	must(r.sim.SetGuestIPv6(sdID(c[1]), "fd00::1"))
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		r.byID = map[string]sdGroup{}
		for _, g := range r.sd(t, "?port=9300") {
			r.byID[sdID(g)] = g
		}
		if got := r.byID[sdID(c[2])].Labels["__meta_veil_tags"]; got != ",port:0,port:http,prod,web," {
			return fmt.Errorf("tags of %s: %q", sdID(c[2]), got)
		}
		if len(r.sd(t, "?family=ipv6")) != 2 {
			return fmt.Errorf("the IPv6 addresses are not read yet")
		}
		return nil
	}, "the new tags and IPv6 addresses seen")
}

// portsAndFamilies: port tags override ?port=, ?family=ipv6 lists global addresses only and
// ?family=any every guest once, labelled.
func (r *filterRig) portsAndFamilies(t *testing.T) {
	c, byID := r.checked, r.byID
	t.Run("port tags override ?port=", func(t *testing.T) {
		want := map[string][]string{
			sdID(c[0]): {sdHost(c[0]) + ":9182"},
			sdID(c[1]): {sdHost(c[1]) + ":8080", sdHost(c[1]) + ":9100"},
			sdID(c[2]): {sdHost(c[2]) + ":9300"},
			sdID(c[3]): {sdHost(c[3]) + ":9300"},
		}
		for vm, targets := range want {
			if got := byID[vm].Targets; !slices.Equal(got, targets) {
				t.Errorf("%s: targets %v, want %v", vm, got, targets)
			}
		}
		if len(byID) != len(r.base) {
			t.Errorf("%d groups, want %d", len(byID), len(r.base))
		}
	})
	t.Run("family ipv6: global addresses only, in brackets", func(t *testing.T) {
		got := r.sd(t, "?family=ipv6")
		want := []sdGroup{
			{Targets: []string{"[fd00::1]:8080", "[fd00::1]:9100"}, Labels: byID[sdID(c[1])].Labels},
			{Targets: []string{"[2001:db8::3]:9100"}, Labels: byID[sdID(c[3])].Labels},
		}
		sort.Slice(want, func(i, j int) bool { return sdID(want[i]) < sdID(want[j]) })
		if diff := diffSD(got, want); diff != "" {
			t.Error(diff)
		}
	})
	t.Run("family any: every guest once, IPv4 first, labelled", func(t *testing.T) {
		// Against ?port= read just before: a guest's OS, read meanwhile, adds a label to both.
		testutil.EventuallyNil(t, 30*time.Second, func() error {
			byID := map[string]sdGroup{}
			for _, g := range r.sd(t, "?port=9300") {
				byID[sdID(g)] = g
			}
			got := r.sd(t, "?family=any&port=9300")
			if len(got) != len(byID) {
				return fmt.Errorf("%d groups, want %d", len(got), len(byID))
			}
			for _, g := range got {
				w := byID[sdID(g)]
				if g.Labels["__meta_veil_ip_family"] != "ipv4" || !slices.Equal(g.Targets, w.Targets) || len(g.Labels) != len(w.Labels)+1 {
					return fmt.Errorf("%v, want %v with __meta_veil_ip_family ipv4", g, w)
				}
			}
			return nil
		}, "?family=any to list every guest once, labelled")
	})
}

// filterCase is one server-side filter: its query, which groups of the unfiltered answer it
// keeps (nil: none), and how many it must keep at least to prove anything.
type filterCase struct {
	name, query string
	keep        func(g sdGroup) bool
	atLeast     int
}

func hasTag(g sdGroup, tag string) bool {
	return strings.Contains(g.Labels["__meta_veil_tags"], ","+tag+",")
}

func (r *filterRig) filterCases() []filterCase {
	node0 := r.checked[0].Labels
	osID := node0["__meta_veil_os_id"]
	otherNode := ""
	for _, g := range r.base {
		if g.Labels["__meta_veil_node_id"] != node0["__meta_veil_node_id"] {
			otherNode = g.Labels["__meta_veil_node"]
		}
	}
	node1 := r.byID[sdID(r.checked[1])].Labels["__meta_veil_node_id"]
	label := func(k, v string) func(sdGroup) bool { return func(g sdGroup) bool { return g.Labels[k] == v } }
	return []filterCase{
		{"one tag", "?port=9300&tag=web", func(g sdGroup) bool { return hasTag(g, "web") }, 2},
		{"every tag", "?port=9300&tag=web&tag=prod", func(g sdGroup) bool { return hasTag(g, "web") && hasTag(g, "prod") }, 1},
		{"an unknown tag", "?port=9300&tag=web&tag=nope", nil, 0},
		{"an empty tag", "?port=9300&tag=", nil, 0},
		{"node by id", "?port=9300&node=" + node0["__meta_veil_node_id"], label("__meta_veil_node_id", node0["__meta_veil_node_id"]), 1},
		{"node by name", "?port=9300&node=" + node0["__meta_veil_node"], label("__meta_veil_node", node0["__meta_veil_node"]), 1},
		{"nodes: any of them", "?port=9300&node=" + node0["__meta_veil_node"] + "&node=" + otherNode,
			func(g sdGroup) bool {
				return g.Labels["__meta_veil_node"] == node0["__meta_veil_node"] || g.Labels["__meta_veil_node"] == otherNode
			}, 2},
		{"an unknown node", "?port=9300&node=nowhere", nil, 0},
		{"os_id", "?port=9300&os_id=" + osID, label("__meta_veil_os_id", osID), 1},
		{"an unknown os_id", "?port=9300&os_id=plan9", nil, 0},
		{"filters together", "?port=9300&tag=web&os_id=" + osID + "&node=" + node1,
			func(g sdGroup) bool {
				return hasTag(g, "web") && g.Labels["__meta_veil_os_id"] == osID && g.Labels["__meta_veil_node_id"] == node1
			}, 0},
	}
}

// filters compares each filtered answer with the unfiltered answer filtered here, read right
// before and after the filtered one: guests the checker reaches meanwhile gain an os_id, so a
// pair read across such a change is read again.
func (r *filterRig) filters(t *testing.T) {
	for _, tt := range r.filterCases() {
		t.Run(tt.name, func(t *testing.T) {
			var got []sdGroup
			testutil.EventuallyNil(t, 15*time.Second, func() error {
				before := r.sd(t, "?port=9300")
				got = r.sd(t, tt.query)
				if diffSD(r.sd(t, "?port=9300"), before) != "" {
					return fmt.Errorf("the answer changed while it was read")
				}
				var want []sdGroup
				for _, g := range before {
					if tt.keep != nil && tt.keep(g) {
						want = append(want, g)
					}
				}
				if diff := diffSD(got, want); diff != "" {
					return errors.New(diff)
				}
				return nil
			}, "%s to answer what the unfiltered answer holds of it", tt.query)
			if len(got) < tt.atLeast || tt.atLeast > 0 && len(got) == len(r.base) {
				t.Errorf("%d groups of %d: the case proves nothing", len(got), len(r.base))
			}
		})
	}
}
