package veil_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestDevicesDecodeLeniently: disks and interfaces as the platform lists them decode, with
// sizes as numbers or numeric strings, a free disk's null VM, and missing sizes left nil (not 0).
func TestDevicesDecodeLeniently(t *testing.T) {
	pages := map[string]string{
		"/api/vdisks/": `{"count":3,"next":null,"previous":null,"results":[
			{"id":"d1","verbose_name":"web_disk1","status":"ACTIVE","size":12.5,"virtual_size":40,
			 "datapool":{"id":"p1","verbose_name":"pool-1","type":"zfs"},"vdisk":{"id":"vm1","verbose_name":"web"},"hints":0},
			{"id":"d2","verbose_name":"free","status":"ACTIVE","size":"3.25","virtual_size":"10",
			 "datapool":{"id":"p1","verbose_name":"pool-1","type":"zfs"},"vdisk":null},
			{"id":"d3","verbose_name":"odd","datapool":"p2"}]}`,
		"/api/vmachine-infs/": `{"count":1,"next":null,"previous":null,"results":[
			{"id":"n1","name":"net0","vmachine_info":{"id":"vm1","verbose_name":"web"},"mac_address":"52:54:00:00:00:01",
			 "nic_driver":"virtio","status":"ACTIVE","vmachine_name":"web",
			 "vnetwork_info":{"id":"net","verbose_name":"Default","entity_type":"vnetworks"}}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(pages[r.URL.Path]))
	}))
	defer srv.Close()
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	disks, err := c.Vdisks(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := veil.DatapoolRef{ID: "p1", VerboseName: "pool-1", Type: "zfs"}
	want := []veil.Vdisk{
		{ID: "d1", VerboseName: "web_disk1", Status: "ACTIVE", Size: num(12.5), VirtualSize: num(40), Datapool: pool,
			Domain: &veil.Ref{ID: "vm1", VerboseName: "web"}},
		{ID: "d2", VerboseName: "free", Status: "ACTIVE", Size: num(3.25), VirtualSize: num(10), Datapool: pool},
		{ID: "d3", VerboseName: "odd"}, // a datapool as a bare string is not the documented shape: left empty
	}
	if !reflect.DeepEqual(disks, want) {
		t.Errorf("disks\n got %+v\nwant %+v", disks, want)
	}
	nics, err := c.VMachineInfs(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNICs := []veil.VMachineInf{{ID: "n1", Name: "net0", Domain: &veil.Ref{ID: "vm1", VerboseName: "web"}, DomainName: "web",
		MACAddress: "52:54:00:00:00:01", NICDriver: "virtio", Status: "ACTIVE",
		Network: &veil.NetworkRef{ID: "net", VerboseName: "Default", EntityType: "vnetworks"}}}
	if !reflect.DeepEqual(nics, wantNICs) {
		t.Errorf("interfaces\n got %+v\nwant %+v", nics, wantNICs)
	}
}
