package veiltest

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDevicesMatchTheirVMsAndDatapools: every VM lists vdisks_count disks on its datapool and one
// or two interfaces; free disks belong to no VM; a datapool's vdisk_count is the disks on it;
// the collections page as every collection does and their filters select.
func TestDevicesMatchTheirVMsAndDatapools(t *testing.T) {
	_, c := newSim(t, Options{Seed: 3, VMs: 120, Datapools: 3})
	vms := all(t, c, "/api/domains/")
	disks := all(t, c, "/api/vdisks/?limit=37") // pages of an odd size: count and next as elsewhere
	nics := all(t, c, "/api/vmachine-infs/")
	ids := map[string]bool{}
	perVM, free := map[string]int{}, 0
	perPool := map[string]int{}
	for _, k := range disks {
		id := k["id"].(string)
		if ids[id] {
			t.Fatalf("disk %s listed twice", id)
		}
		ids[id] = true
		for _, key := range []string{"verbose_name", "status", "size", "virtual_size", "datapool", "vdisk", "hints"} {
			if _, ok := k[key]; !ok {
				t.Fatalf("disk lacks %q: %v", key, k)
			}
		}
		if vs := k["virtual_size"].(float64); vs != float64(int(vs)) || vs <= 0 || k["size"].(float64) > vs || k["size"].(float64) <= 0 {
			t.Fatalf("sizes of %v", k)
		}
		perPool[k["datapool"].(map[string]any)["id"].(string)]++
		if vm, ok := k["vdisk"].(map[string]any); ok {
			perVM[vm["id"].(string)]++
		} else {
			free++
		}
	}
	if free < 3 {
		t.Errorf("%d free disks, want at least one per datapool", free)
	}
	nicsPerVM := map[string]int{}
	for _, n := range nics {
		vm := n["vmachine_info"].(map[string]any)
		if n["vmachine_name"] != vm["verbose_name"] || n["mac_address"] == "" || n["vnetwork_info"].(map[string]any)["id"] == "" {
			t.Fatalf("interface %v", n)
		}
		if _, ok := n["link_state"]; ok {
			t.Fatalf("link_state in a list item (detail only): %v", n)
		}
		nicsPerVM[vm["id"].(string)]++
	}
	for _, vm := range vms {
		id := vm["id"].(string)
		if got, want := perVM[id], int(vm["vdisks_count"].(float64)); got != want {
			t.Errorf("VM %s: %d disks listed, vdisks_count %d", id, got, want)
		}
		if n := nicsPerVM[id]; n < 1 || n > 2 {
			t.Errorf("VM %s: %d interfaces", id, n)
		}
		if n := len(all(t, c, "/api/vdisks/?domain="+id)); n != perVM[id] {
			t.Errorf("VM %s: filter domain gives %d disks, want %d", id, n, perVM[id])
		}
	}
	for _, p := range all(t, c, "/api/data-pools/") {
		id := p["id"].(string)
		if got := int(p["vdisk_count"].(float64)); got != perPool[id] {
			t.Errorf("datapool %s: vdisk_count %d, %d disks listed on it", id, got, perPool[id])
		}
		if n := len(all(t, c, "/api/vdisks/?datapool="+id)); n != perPool[id] {
			t.Errorf("datapool %s: filter gives %d disks, want %d", id, n, perPool[id])
		}
	}
	if n := len(all(t, c, "/api/vdisks/?datapool=00000000-0000-4000-8000-000000000000")); n != 0 {
		t.Errorf("a datapool that names nothing gives %d disks", n)
	}
	if n := len(all(t, c, "/api/vmachine-infs/?domain="+vms[0]["id"].(string))); n != nicsPerVM[vms[0]["id"].(string)] {
		t.Errorf("filter domain of interfaces gives %d", n)
	}
}

// TestDeviceDetails: a disk's detail adds snapshots, bus and cache to its list item, an
// interface's its link_state and node; some disks have snapshots, some links are down.
func TestDeviceDetails(t *testing.T) {
	_, c := newSim(t, Options{Seed: 5, VMs: 60})
	snapped, down := 0, 0
	for _, k := range all(t, c, "/api/vdisks/") {
		d := c.json("GET", "/api/vdisks/"+k["id"].(string)+"/", nil, 200)
		for key, v := range k {
			if !reflect.DeepEqual(d[key], v) {
				t.Fatalf("detail %q = %v, list %v", key, d[key], v)
			}
		}
		switch d["target_bus"] {
		case "virtio", "ide", "scsi", "sata":
		default:
			t.Fatalf("bus %v", d["target_bus"])
		}
		snaps := d["snapshots"].([]any)
		for _, s := range snaps {
			if s.(map[string]any)["vdisk"] != k["id"] {
				t.Fatalf("snapshot %v of disk %v", s, k["id"])
			}
		}
		if len(snaps) > 0 {
			snapped++
		}
	}
	vmNode := map[string]any{}
	for _, vm := range all(t, c, "/api/domains/") {
		vmNode[vm["id"].(string)] = vm["node"].(map[string]any)["id"]
	}
	for _, n := range all(t, c, "/api/vmachine-infs/") {
		d := c.json("GET", "/api/vmachine-infs/"+n["id"].(string)+"/", nil, 200)
		switch d["link_state"] {
		case "up":
		case "down":
			down++
		default:
			t.Fatalf("link_state %v", d["link_state"])
		}
		if d["node_info"].(map[string]any)["id"] != vmNode[n["vmachine_info"].(map[string]any)["id"].(string)] {
			t.Fatalf("node_info %v of %v", d["node_info"], n)
		}
	}
	if snapped == 0 || down == 0 {
		t.Errorf("%d disks with snapshots, %d links down: want some of each", snapped, down)
	}
	if st, b := c.do("GET", "/api/vdisks/00000000-0000-4000-8000-000000000000/", nil); st != 404 || errorOf(t, b)["code"] != "50004" {
		t.Errorf("unknown disk: %d %s", st, b)
	}
}

// TestDevicesFollowCloneAndRemoval: a clone gets disks of its source's sizes and as many
// interfaces; a removed VM takes its devices along and its datapool's count goes down.
func TestDevicesFollowCloneAndRemoval(t *testing.T) {
	s, c := newSim(t, Options{Seed: 9, VMs: 10, Templates: -1, TaskDuration: 20 * time.Millisecond})
	src := s.DomainIDs()[0]
	vm := c.json("GET", "/api/domains/"+src+"/", nil, 200)
	pool := vm["datapool"].(map[string]any)["id"].(string)
	poolCount := func() int { return int(c.json("GET", "/api/data-pools/"+pool+"/", nil, 200)["vdisk_count"].(float64)) }
	before := poolCount()
	const cloneID = "0b5a2c1e-7d3f-4e8a-9b1c-2d3e4f5a6b77"
	c.json("POST", "/api/domains/"+src+"/clone/", map[string]any{"verbose_name": "copy", "domains_ids": []string{cloneID}}, 200)
	sizes := func(vm string) []float64 {
		var out []float64
		for _, k := range all(t, c, "/api/vdisks/?domain="+vm) {
			out = append(out, k["virtual_size"].(float64))
		}
		return out
	}
	if got, want := sizes(cloneID), sizes(src); len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("clone's disks %v, source's %v", got, want)
	}
	if got, want := len(all(t, c, "/api/vmachine-infs/?domain="+cloneID)), len(all(t, c, "/api/vmachine-infs/?domain="+src)); got != want {
		t.Errorf("clone has %d interfaces, source %d", got, want)
	}
	if got := poolCount(); got != before+len(sizes(src)) {
		t.Errorf("vdisk_count %d after the clone, want %d", got, before+len(sizes(src)))
	}
	disk := all(t, c, "/api/vdisks/?domain="+cloneID)[0]["id"].(string)
	c.json("POST", "/api/domains/"+cloneID+"/remove/", map[string]any{}, 200)
	if n := len(all(t, c, "/api/vdisks/?domain="+cloneID)) + len(all(t, c, "/api/vmachine-infs/?domain="+cloneID)); n != 0 {
		t.Errorf("%d devices of the removed VM still listed", n)
	}
	if st, _ := c.do("GET", "/api/vdisks/"+disk+"/", nil); st != 404 {
		t.Errorf("a removed VM's disk answers %d", st)
	}
	if got := poolCount(); got != before {
		t.Errorf("vdisk_count %d after the removal, want %d", got, before)
	}
	if err := s.DeleteVM(src); err != nil {
		t.Fatal(err)
	}
	if n := len(all(t, c, "/api/vmachine-infs/?domain="+src)); n != 0 {
		t.Errorf("DeleteVM left %d interfaces", n)
	}
}

// TestDevicesDoNotChangeTheSeededInventory: the devices are drawn apart, so the VMs, nodes and
// datapools of a seed are those the simulator had before it had devices.
func TestDevicesDoNotChangeTheSeededInventory(t *testing.T) {
	_, with := newSim(t, Options{Seed: 11, VMs: 30})
	_, without := newSim(t, Options{Seed: 11, VMs: 30, NoDevices: true})
	for _, path := range []string{"/api/domains/", "/api/nodes/"} {
		if a, b := all(t, with, path), all(t, without, path); !reflect.DeepEqual(a, b) {
			t.Errorf("%s differs with devices", path)
		}
	}
}

// TestNoDevicesIsAnOlderController: Options.NoDevices answers 404 on both collections and their
// details, before the token is looked at, and the docs do not list them.
func TestNoDevicesIsAnOlderController(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3, NoDevices: true})
	anon := &client{t: t, base: s.URL}
	for _, path := range []string{"/api/vdisks/", "/api/vmachine-infs/", "/api/vdisks/00000000-0000-4000-8000-000000000001/"} {
		for _, cl := range []*client{c, anon} {
			if st, b := cl.do("GET", path, nil); st != http.StatusNotFound || errorOf(t, b)["code"] != "50004" {
				t.Errorf("GET %s (token %q): %d %s", path, cl.token, st, b)
			}
		}
	}
	_, page := c.do("GET", "/api/docs/", nil)
	if st, _ := c.do("GET", "/api/nodes/", nil); st != 200 {
		t.Errorf("nodes answer %d", st)
	}
	for _, p := range []string{"/api/vdisks/", "/api/vmachine-infs/"} {
		if strings.Contains(string(page), p) {
			t.Errorf("docs list %s", p)
		}
	}
}
