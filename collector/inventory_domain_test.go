package collector

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestTagsLabel: tags come as strings or {colour, verbose_name} objects; the label is their
// names sorted and joined by commas.
func TestTagsLabel(t *testing.T) {
	tests := []struct{ json, want string }{
		{`[]`, ""},
		{`null`, ""},
		{`["prod"]`, "prod"},
		{`["web","prod","db"]`, "db,prod,web"},
		{`[{"colour":"#ff0000","verbose_name":"prod"},{"colour":"#00ff00","verbose_name":"1c"}]`, "1c,prod"},
		{`["b",{"colour":"red","verbose_name":"a"}]`, "a,b"},
	}
	for _, tt := range tests {
		var tags []veil.Tag
		if err := json.Unmarshal([]byte(tt.json), &tags); err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		if got := inventory.TagNames(tags); got != tt.want {
			t.Errorf("tags %s: label %q, want %q", tt.json, got, tt.want)
		}
	}
}

// TestGuestInfoOnlyWhenTheAgentReports: veil_domain_guest_info is there for the VMs whose
// guest_utils carry a hostname or an address, with the first address, and absent otherwise.
func TestGuestInfoOnlyWhenTheAgentReports(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 21, VMs: 30, AgentFraction: 0.5}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	with := 0
	for _, d := range f.inv.Domains() {
		g := d.GuestUtils
		s := series(t, f.inv, "veil_domain_guest_info", d.ID)
		if g.Hostname == "" && len(g.IPv4) == 0 {
			if len(s) != 0 {
				t.Errorf("%s without agent data has %q", d.ID, s)
			}
			continue
		}
		with++
		if len(s) != 1 || !strings.Contains(s[0], `hostname="`+g.Hostname+`"`) || !strings.Contains(s[0], `ip="`+g.IPv4[0]+`"`) {
			t.Errorf("%s: %q, want hostname %q ip %q", d.ID, s, g.Hostname, g.IPv4)
		}
	}
	if with == 0 || with == 30 {
		t.Errorf("%d of 30 VMs report a guest: the test proves little", with)
	}
}
