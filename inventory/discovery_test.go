package inventory

import (
	"slices"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestGuestTargetsAddressesAndPortTags: the primary IPv4 address is the first usable one of
// guest_utils (a link-local one is skipped), an IPv6 address there is kept apart, VMs without any
// address are kept (their IPv6 may come from the guest checker), and port tags are parsed.
func TestGuestTargetsAddressesAndPortTags(t *testing.T) {
	on := veil.Number(veil.PowerOn)
	doms := []veil.Domain{
		{ID: "b", UserPowerState: on, GuestUtils: veil.GuestUtils{IPv4: []string{"169.254.1.1", "10.0.0.2", "10.0.0.3"}},
			Tags: []veil.Tag{{Name: "port:9182"}, {Name: "port:80"}, {Name: "port:9182"}, {Name: "port:0"}, {Name: "port:65536"}, {Name: "port:+1"}, {Name: "port:09"}, {Name: "Port:1"}}},
		{ID: "a", UserPowerState: on, GuestUtils: veil.GuestUtils{IPv4: []string{"fe80::1", "2001:db8::a"}}},
		{ID: "c", UserPowerState: on},
		{ID: "off", UserPowerState: veil.Number(veil.PowerOff), GuestUtils: veil.GuestUtils{IPv4: []string{"10.0.0.9"}}},
		{ID: "tpl", UserPowerState: on, Template: true},
	}
	got := guestTargets(NewVMs(refs(doms)), nil)
	type row struct {
		id, v4, v6 string
		ports      []string
	}
	var rows []row
	for _, g := range got {
		rows = append(rows, row{g.Domain.ID, g.IPv4, g.IPv6, g.Ports})
	}
	want := []row{{"a", "", "2001:db8::a", nil}, {"b", "10.0.0.2", "", []string{"80", "9182"}}, {"c", "", "", nil}}
	if !slices.EqualFunc(rows, want, func(x, y row) bool {
		return x.id == y.id && x.v4 == y.v4 && x.v6 == y.v6 && slices.Equal(x.ports, y.ports)
	}) {
		t.Errorf("targets %+v, want %+v", rows, want)
	}
}
