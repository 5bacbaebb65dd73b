package veil_test

// Golden fixtures of the platform's detail shapes, written by hand from
// the platform's documented behaviour beyond its spec (not from the simulator), served over real HTTP and read with
// the client's ordinary calls.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// vendorServer answers each "METHOD path" with a fixture of testdata/vendor.
func vendorServer(t *testing.T, routes map[string]string) *veil.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		file, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			http.Error(w, `{"errors":[{"code":"50004","detail":"URL is not found."}]}`, http.StatusNotFound)
			return
		}
		b, err := os.ReadFile(filepath.Join("testdata", "vendor", file))
		if err != nil {
			t.Error(err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost && r.URL.Query().Get("async") == "1" {
			w.WriteHeader(http.StatusAccepted)
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "jwt golden", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func at(s string) veil.Time {
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return veil.Time{Time: v}
}

func num(f float64) *veil.Number { n := veil.Number(f); return &n }

// The ids in the fixtures of testdata/vendor.
const (
	vendorVM = "6d3c1a52-3f7e-4f1b-9a55-0c2a51e4b001"
	specVM   = "6d3c1a52-3f7e-4f1b-9a55-0c2a51e4b002"
	node     = "1b7f8a9e-0d4c-4c1e-8f0e-2a9d3c4b5e01"
)

// vendorAgent is the guest agent of vendorVM in the fixtures.
var vendorAgent = veil.GuestUtils{Version: "101.1.0", Hostname: "win-test", IPv4: []string{"10.0.0.5"}, Interfaces: []string{"eth0"}, QemuState: true}

func TestVendorDetailShapesDecode(t *testing.T) {
	c := vendorServer(t, map[string]string{
		"GET /api/domains/" + vendorVM + "/":                "domain_detail_vendor.json",
		"GET /api/domains/" + specVM + "/":                  "domain_detail_spec.json",
		"GET /api/nodes/" + node + "/":                      "node_detail.json",
		"GET /api/tasks/running/":                           "task_running.json",
		"GET /api/tasks/done/":                              "task_done.json",
		"POST /api/domains/" + vendorVM + "/guest-command/": "guest_network_interfaces.json",
	})

	t.Run("domain as the vendor's clients show it", func(t *testing.T) { vendorDomainDecodes(t, c) })
	t.Run("domain as the spec shows it", func(t *testing.T) { specDomainDecodes(t, c) })
	t.Run("node detail", func(t *testing.T) { vendorNodeDecodes(t, c) })
	t.Run("task executed is a number while running and a string when done", func(t *testing.T) { vendorTasksDecode(t, c) })
	t.Run("guest network interfaces as QEMU documents them", func(t *testing.T) { vendorGuestInterfacesDecode(t, c) })
}

func vendorDomainDecodes(t *testing.T, c *veil.Client) {
	ctx := context.Background()
	got, err := c.Domain(ctx, vendorVM)
	if err != nil {
		t.Fatal(err)
	}
	want := &veil.Domain{
		ID: vendorVM, VerboseName: "win_test", Status: "ACTIVE", UserPowerState: veil.PowerOn,
		CPUCount: 4, MemoryCount: 4096, Thin: true, GuestUtils: vendorAgent,
		Node:               veil.Ref{ID: "1b7f8a9e-0d4c-4c1e-8f0e-2a9d3c4b5e01", VerboseName: "node-1"},
		ResourcePool:       &veil.Ref{ID: "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c01", VerboseName: "Resource pool"},
		CPUUsedPercentUser: num(12.5), MemUsedPercentUser: num(40.25), VdisksCount: 1,
		Tags:   []veil.Tag{{Name: "prod", Colour: "#ff0000"}, {Name: "db", Colour: "#00ff00"}},
		OSType: "Windows", OSVersion: "Windows 10",
		Cluster:             veil.Ref{ID: "5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e01"},
		CPUTopology:         &veil.CPUTopology{CPUCount: 4, CPUSockets: 1, CPUCores: 2, CPUThreads: 2, CPUModel: "host-model"},
		UptimeOnCurrentNode: veil.Uptime{Seconds: 3600, StartTime: at("2021-08-20T10:08:09.761081Z"), SystemTime: at("2021-08-20T11:08:09.761081Z")},
		UptimeTotal:         veil.Uptime{Seconds: 86400},
		Permissions:         veil.Permissions{"shutdown", "start"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func specDomainDecodes(t *testing.T, c *veil.Client) {
	ctx := context.Background()
	got, err := c.Domain(ctx, specVM)
	if err != nil {
		t.Fatal(err)
	}
	want := &veil.Domain{
		ID: specVM, VerboseName: "ubuntu-1", Status: "ACTIVE", UserPowerState: veil.PowerOff,
		CPUCount: 2, MemoryCount: 2048,
		Node:               veil.Ref{ID: "1b7f8a9e-0d4c-4c1e-8f0e-2a9d3c4b5e02", VerboseName: "node-2"},
		Parent:             &veil.Ref{ID: "6d3c1a52-3f7e-4f1b-9a55-0c2a51e4b0ff", VerboseName: "ubuntu-template"},
		CPUUsedPercentUser: num(3.5), MemUsedPercentUser: num(0), VdisksCount: 2,
		Tags:   []veil.Tag{{Name: "prod"}, {Name: "web"}},
		OSType: "Linux", OSVersion: "Ubuntu 22.04",
		Cluster:             veil.Ref{ID: "5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e02", VerboseName: "cluster-2"},
		UptimeOnCurrentNode: veil.Uptime{Seconds: 125.5},
		Permissions:         veil.Permissions{"start", "shutdown"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func vendorNodeDecodes(t *testing.T, c *veil.Client) {
	ctx := context.Background()
	got, err := c.Node(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	ballooning := true
	want := &veil.Node{
		ID: node, VerboseName: "node-1", Status: "ACTIVE", CPUCount: 32, MemoryCount: 257682,
		ManagementIP: "192.168.10.11", DomainsCount: 12, DomainsOnCount: 7,
		Cluster:        veil.Ref{ID: "5c6d7e8f-9a0b-4c1d-8e2f-3a4b5c6d7e01"},
		DatacenterName: "Default datacenter", DatacenterID: "7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a01",
		CPUUsedPercentUser: num(2.49), MemUsedPercentUser: num(31.7),
		Version: "4.7.5", Ballooning: &ballooning,
		Uptime:      veil.Uptime{Seconds: 1209600, StartTime: at("2021-08-06T10:00:00Z"), SystemTime: at("2021-08-20T10:00:00Z"), Timezone: "Europe/Moscow"},
		CPUTopology: &veil.CPUTopology{CPUCount: 32, CPUSockets: 2, CPUCores: 8, CPUThreads: 2, CPUModel: "Intel Xeon"},
		Created:     "2021-01-10T09:00:00Z", Modified: "2021-08-20T10:00:00Z",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func vendorTasksDecode(t *testing.T, c *veil.Client) {
	ctx := context.Background()
	running, err := c.Task(ctx, "running")
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Task(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if running.Executed != 0 || running.Final() || running.Progress != 40 || !running.FinishedTime.IsZero() {
		t.Errorf("running task %+v", running)
	}
	if done.Executed != 2.492376 || !done.Final() || done.FinishedTime != at("2021-08-20T10:08:12.253457Z") {
		t.Errorf("finished task %+v", done)
	}
}

func vendorGuestInterfacesDecode(t *testing.T, c *veil.Client) {
	ctx := context.Background()
	got, err := c.GuestNetworkInterfaces(ctx, vendorVM, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []veil.GuestNetworkInterface{
		{Name: "lo", HardwareAddress: "00:00:00:00:00:00",
			IPAddresses: []veil.GuestIPAddress{{Type: "ipv4", Address: "127.0.0.1", Prefix: 8}},
			Statistics:  &veil.GuestNetworkStatistics{RxBytes: 5120, RxPackets: 40, TxBytes: 5120, TxPackets: 40}},
		{Name: "eth0", HardwareAddress: "52:54:00:12:34:56",
			IPAddresses: []veil.GuestIPAddress{{Type: "ipv4", Address: "10.0.0.5", Prefix: 24}, {Type: "ipv6", Address: "fe80::5054:ff:fe12:3456", Prefix: 64}},
			Statistics: &veil.GuestNetworkStatistics{RxBytes: 18446744073709, RxPackets: 1234567, RxErrs: 3, RxDropped: 7,
				TxBytes: 987654321, TxPackets: 654321, TxErrs: 1, TxDropped: 2}},
		{Name: "eth1", HardwareAddress: "52:54:00:12:34:57"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestPermissionsArrayOrObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want veil.Permissions
	}{
		{`["start","remove"]`, veil.Permissions{"start", "remove"}},
		{`{"remove":true,"start":{"allowed":true},"clone":false}`, veil.Permissions{"remove", "start"}},
		{`null`, nil},
		{`[]`, veil.Permissions{}},
	} {
		var p veil.Permissions
		if err := p.UnmarshalJSON([]byte(tc.in)); err != nil || !reflect.DeepEqual(p, tc.want) {
			t.Errorf("%s = %#v, %v; want %#v", tc.in, p, err, tc.want)
		}
	}
}

func TestUptimeNumberStringOrObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want veil.Uptime
	}{
		{`3600`, veil.Uptime{Seconds: 3600}},
		{`"12.5"`, veil.Uptime{Seconds: 12.5}},
		{`null`, veil.Uptime{}},
		{`{"uptime":"60","start_time":"2021-08-20T10:08:09Z","system_time":null}`, veil.Uptime{Seconds: 60, StartTime: at("2021-08-20T10:08:09Z")}},
	} {
		var u veil.Uptime
		if err := u.UnmarshalJSON([]byte(tc.in)); err != nil || !reflect.DeepEqual(u, tc.want) {
			t.Errorf("%s = %+v, %v; want %+v", tc.in, u, err, tc.want)
		}
	}
	var u veil.Uptime
	if err := u.UnmarshalJSON([]byte(`[1]`)); err == nil {
		t.Errorf("an array read as uptime %+v", u)
	}
}
