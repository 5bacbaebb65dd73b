package guest

import (
	"regexp"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestGuestIPv6NeverLinkLocal: the first global IPv6 address of an interface that is not
// excluded, in the guest's order; link-local, loopback, multicast, zoned and IPv4-mapped
// addresses never.
func TestGuestIPv6NeverLinkLocal(t *testing.T) {
	v6 := func(addrs ...string) []veil.GuestIPAddress {
		var out []veil.GuestIPAddress
		for _, a := range addrs {
			out = append(out, veil.GuestIPAddress{Type: "ipv6", Address: a})
		}
		return out
	}
	lo := regexp.MustCompile(`^lo$`)
	tests := []struct {
		name string
		list []veil.GuestNetworkInterface
		want string
	}{
		{"link-local only", []veil.GuestNetworkInterface{{Name: "eth0", IPAddresses: v6("fe80::1", "FE80::2", "febf::3")}}, ""},
		{"global after link-local", []veil.GuestNetworkInterface{{Name: "eth0", IPAddresses: v6("fe80::1", "2001:DB8::1")}}, "2001:db8::1"},
		{"ULA", []veil.GuestNetworkInterface{{Name: "eth0", IPAddresses: v6("fd12:3456::1")}}, "fd12:3456::1"},
		{"loopback, multicast, unspecified, zoned, mapped, garbage", []veil.GuestNetworkInterface{{Name: "eth0",
			IPAddresses: v6("::1", "ff02::1", "::", "2001:db8::9%eth0", "::ffff:10.0.0.1", "not-an-address")}}, ""},
		{"an excluded interface", []veil.GuestNetworkInterface{{Name: "lo", IPAddresses: v6("2001:db8::1")}, {Name: "eth1", IPAddresses: v6("2001:db8::2")}}, "2001:db8::2"},
		{"IPv4 typed entries are not IPv6", []veil.GuestNetworkInterface{{Name: "eth0", IPAddresses: []veil.GuestIPAddress{{Type: "ipv4", Address: "2001:db8::5"}}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := guestIPv6(tt.list, lo); got != tt.want {
				t.Errorf("guestIPv6 = %q, want %q", got, tt.want)
			}
		})
	}
}
