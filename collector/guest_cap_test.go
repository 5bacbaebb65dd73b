package collector

import (
	"fmt"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestGuestDevicesAreCapped: a guest reporting more interfaces than maxGuestDevices has the
// first by name exported, no more.
func TestGuestDevicesAreCapped(t *testing.T) {
	var list []veil.GuestNetworkInterface
	for i := range maxGuestDevices + 10 {
		list = append(list, veil.GuestNetworkInterface{Name: fmt.Sprintf("veth%03d", i), Statistics: &veil.GuestNetworkStatistics{}})
	}
	nics := guestInterfaces(list, nil)
	if len(nics) != maxGuestDevices || nics[0].name != "veth000" || nics[len(nics)-1].name != fmt.Sprintf("veth%03d", maxGuestDevices-1) {
		t.Errorf("%d interfaces kept, %s..%s", len(nics), nics[0].name, nics[len(nics)-1].name)
	}
}
