package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// simList reads a whole collection of the simulator over plain HTTP, apart from the client the
// inventory uses.
func simList(t *testing.T, sim *veiltest.Server, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for offset := 0; ; offset += 100 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s%s?limit=100&offset=%d", sim.URL, path, offset), nil)
		req.Header.Set("Authorization", "jwt "+sim.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Count   int              `json:"count"`
			Results []map[string]any `json:"results"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		out = append(out, page.Results...)
		if len(out) >= page.Count || len(page.Results) == 0 {
			return out
		}
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestDeviceSeriesMatchTheSimulator: each disk and interface the simulator lists gives its
// series, values in bytes from GB taken as GiB, each datapool the sum of its disks' virtual
// sizes; what only the details carry (snapshots, link_state) gives no series.
func TestDeviceSeriesMatchTheSimulator(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 7, Nodes: 2, Datapools: 3, VMs: 12, Templates: -1}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	disks := simList(t, f.sim, "/api/vdisks/")
	pools := map[string]float64{}
	free := 0
	for _, k := range disks {
		id := k["id"].(string)
		pool := k["datapool"].(map[string]any)["id"].(string)
		vm, name := "", ""
		if r, ok := k["vdisk"].(map[string]any); ok {
			vm, name = r["id"].(string), r["verbose_name"].(string)
		} else {
			free++
		}
		// bus and type: the list carries neither (empty labels are absent labels).
		info := fmt.Sprintf(`veil_vdisk_info{bus="",controller="test",datapool_id=%q,domain=%q,domain_id=%q,status="ACTIVE",type="",vdisk=%q,vdisk_id=%q} 1`,
			pool, name, vm, k["verbose_name"], id)
		if s := series(t, f.inv, `vdisk_id="`+id+`"`, "veil_vdisk_info"); len(s) != 1 || s[0] != info {
			t.Errorf("info of disk %s:\n got %q\nwant %q", id, s, info)
		}
		prov := k["virtual_size"].(float64) * (1 << 30)
		if v := value(t, f.inv, "veil_vdisk_provisioned_bytes{", `vdisk_id="`+id+`"`, `datapool_id="`+pool+`"`); v != fmtFloat(prov) {
			t.Errorf("disk %s provisioned %s, want %s", id, v, fmtFloat(prov))
		}
		if v := value(t, f.inv, "veil_vdisk_allocated_bytes{", `vdisk_id="`+id+`"`); v != fmtFloat(k["size"].(float64)*(1<<30)) {
			t.Errorf("disk %s allocated %s, size %v GB", id, v, k["size"])
		}
		pools[pool] += prov
	}
	if free == 0 {
		t.Fatal("the simulator lists no free disk to check")
	}
	if s := series(t, f.inv, "veil_vdisk_snapshots"); len(s) != 0 {
		t.Errorf("snapshots exported though the list does not carry them: %q", s[:1])
	}
	for _, p := range simList(t, f.sim, "/api/data-pools/") {
		id := p["id"].(string)
		if v := value(t, f.inv, "veil_datapool_provisioned_bytes{", id); v != fmtFloat(pools[id]) {
			t.Errorf("datapool %s provisioned %s, want %s", id, v, fmtFloat(pools[id]))
		}
	}
	nics := simList(t, f.sim, "/api/vmachine-infs/")
	for _, n := range nics {
		vm, net := n["vmachine_info"].(map[string]any), n["vnetwork_info"].(map[string]any)
		want := fmt.Sprintf(`veil_domain_interface_info{controller="test",domain_id=%q,driver=%q,interface=%q,interface_id=%q,mac=%q,network=%q,network_id=%q} 1`,
			vm["id"], n["nic_driver"], n["name"], n["id"], n["mac_address"], net["verbose_name"], net["id"])
		if s := series(t, f.inv, `interface_id="`+n["id"].(string)+`"`); len(s) != 1 || s[0] != want {
			t.Errorf("interface %s:\n got %q\nwant %q", n["id"], s, want)
		}
	}
	if s := series(t, f.inv, "veil_domain_interface_up"); len(s) != 0 {
		t.Errorf("link state exported though the list does not carry it: %q", s[:1])
	}
	for _, name := range []string{collVdisks, collInterfaces} {
		if r := runOf(t, f.inv, name); !r.Success || r.Unavailable {
			t.Errorf("collector %s: %+v", name, r)
		}
	}
	// Series per VM: three per disk and one per interface.
	vms := len(simList(t, f.sim, "/api/domains/"))
	perVM := float64(3*(len(disks)-free)+len(nics)) / float64(vms)
	t.Logf("%d VMs: %d disks (%d free), %d interfaces: %.2f device series per VM", vms, len(disks), free, len(nics), perVM)
}

// TestDeviceCollectionsMissingAreNotAnOutage: a controller without /api/vdisks/ and
// /api/vmachine-infs/ (an older one) keeps veil_up 1; both collections are unavailable, their
// families absent, and they are asked again only at every 10th refresh.
func TestDeviceCollectionsMissingAreNotAnOutage(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 7, VMs: 4, NoDevices: true}, testCollect(), veil.Config{})
	if err := f.refresh(t); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if v := value(t, f.inv, "veil_up"); v != "1" {
		t.Errorf("veil_up %s", v)
	}
	for _, name := range []string{collVdisks, collInterfaces} {
		if r := runOf(t, f.inv, name); r.Success || !r.Unavailable || !strings.Contains(r.Error, "404") {
			t.Errorf("collector %s: %+v, want unavailable (404)", name, r)
		}
	}
	for _, fam := range []string{"veil_vdisk_", "veil_datapool_provisioned_bytes", "veil_domain_interface_"} {
		if s := series(t, f.inv, fam); len(s) != 0 {
			t.Errorf("%s served without the collection: %q", fam, s[:1])
		}
	}
	if logs := f.logs.String(); strings.Count(logs, "not available") != 2 || strings.Contains(logs, "down") {
		t.Errorf("want one line per missing collection, no outage:\n%s", logs)
	}
	f.sim.ResetRequests()
	for range unavailableRetryEvery - 1 {
		f.mustRefresh(t)
	}
	for _, req := range f.sim.Requests() {
		if strings.HasPrefix(req.Path, "/api/vdisks/") || strings.HasPrefix(req.Path, "/api/vmachine-infs/") {
			t.Fatalf("asked again before its turn: %s", req.Path)
		}
	}
}

// TestDeviceSeriesFollowDomainFilters: domain_include/exclude select the disks and interfaces
// of the VMs they select, as the domain families; free disks stay, and a datapool's provisioned
// total counts every disk on it.
func TestDeviceSeriesFollowDomainFilters(t *testing.T) {
	opts := veiltest.Options{Seed: 7, Nodes: 2, Datapools: 2, VMs: 30, Templates: -1}
	cc := testCollect()
	cc.DomainInclude = config.MustRegexp(`^(web|db)-`)
	cc.DomainExclude = config.MustRegexp(`5$`)
	f := newFixture(t, opts, cc, veil.Config{})
	f.mustRefresh(t)
	kept := map[string]bool{}
	for _, d := range f.inv.Domains() {
		kept[d.ID] = true
	}
	if len(kept) == 0 || len(kept) == 30 {
		t.Fatalf("the filters keep %d VMs of 30: nothing to prove", len(kept))
	}
	var wantDisks []string
	pools := map[string]float64{}
	for _, k := range simList(t, f.sim, "/api/vdisks/") {
		pools[k["datapool"].(map[string]any)["id"].(string)] += k["virtual_size"].(float64) * (1 << 30)
		vm, _ := k["vdisk"].(map[string]any)
		if vm == nil || kept[vm["id"].(string)] {
			wantDisks = append(wantDisks, k["id"].(string))
		}
	}
	var gotDisks []string
	for _, s := range series(t, f.inv, "veil_vdisk_provisioned_bytes{") {
		_, rest, _ := strings.Cut(s, `vdisk_id="`)
		gotDisks = append(gotDisks, rest[:36])
	}
	sort.Strings(wantDisks)
	sort.Strings(gotDisks)
	if strings.Join(gotDisks, ",") != strings.Join(wantDisks, ",") {
		t.Errorf("disks exported %d, want %d (the selected VMs' and the free ones)", len(gotDisks), len(wantDisks))
	}
	for id, v := range pools {
		if got := value(t, f.inv, "veil_datapool_provisioned_bytes{", id); got != fmtFloat(v) {
			t.Errorf("datapool %s: %s, want %s (every disk, filtered or not)", id, got, fmtFloat(v))
		}
	}
	want := 0
	for _, n := range simList(t, f.sim, "/api/vmachine-infs/") {
		if kept[n["vmachine_info"].(map[string]any)["id"].(string)] {
			want++
		}
	}
	if got := len(series(t, f.inv, "veil_domain_interface_info")); got != want {
		t.Errorf("%d interfaces exported, want %d of the selected VMs", got, want)
	}
}

// TestDeviceBadInput: sizes as strings are read, missing or negative sizes give no series (none
// invented), snapshots, bus, type and link_state are exported where a list carries them, and
// an interface of no VM or a link state of another word gives no up series.
func TestDeviceBadInput(t *testing.T) {
	pages := map[string]string{
		"/api/vdisks/": `{"count":5,"next":null,"previous":null,"results":[
			{"id":"d1","verbose_name":"a","status":"ACTIVE","size":"1.5","virtual_size":"10","datapool":{"id":"p1","verbose_name":"p","type":"zfs"},"vdisk":{"id":"vm1","verbose_name":"web"}},
			{"id":"d2","verbose_name":"b","status":"ACTIVE","datapool":{"id":"p1"},"vdisk":null},
			{"id":"d3","verbose_name":"c","size":-1,"virtual_size":-5,"datapool":{"id":"p1"},"vdisk":{"id":"vm1","verbose_name":"web"}},
			{"id":"d4","verbose_name":"d","size":2,"virtual_size":4,"datapool":{"id":"p2"},"vdisk":{"id":"vm2","verbose_name":"db"},
			 "snapshots":[{"id":"s1"},{"id":"s2"}],"target_bus":"scsi","disk_type":"raw"},
			{"id":"d5","verbose_name":"e","size":1,"virtual_size":2,"datapool":{"id":"p2"},"vdisk":{"id":"vm2","verbose_name":"db"},"snapshots":[]}]}`,
		"/api/vmachine-infs/": `{"count":4,"next":null,"previous":null,"results":[
			{"id":"n1","name":"net0","vmachine_info":{"id":"vm1","verbose_name":"web"},"mac_address":"52:54:00:AA:00:01","nic_driver":"virtio","link_state":"up"},
			{"id":"n2","name":"net1","vmachine_info":{"id":"vm1","verbose_name":"web"},"link_state":"down","vnetwork_info":{"id":"net","verbose_name":"Default"}},
			{"id":"n3","name":"net0","vmachine_info":{"id":"vm2","verbose_name":"db"},"link_state":"sideways"},
			{"id":"n4","name":"orphan","vmachine_info":null,"link_state":"up"}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := pages[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"errors":[{"code":"50004","msg_key":"detail","detail":"URL is not found."}]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(b))
	}))
	defer srv.Close()
	client, err := veil.New(veil.Config{URL: srv.URL, Token: "t", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	cc := config.Collect{Interval: testCollect().Interval, Vdisks: true, Interfaces: true}
	inv, err := newTestInventory(client, cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	for _, tc := range []struct {
		subs []string
		want []string // values, in label order; none: no series
	}{
		{[]string{"veil_vdisk_provisioned_bytes{", `"d1"`}, []string{fmtFloat(10 * gib)}},
		{[]string{"veil_vdisk_allocated_bytes{", `"d1"`}, []string{fmtFloat(1.5 * gib)}},
		{[]string{"veil_vdisk_provisioned_bytes{", `"d2"`}, nil},
		{[]string{"veil_vdisk_allocated_bytes{", `"d2"`}, nil},
		{[]string{"veil_vdisk_provisioned_bytes{", `"d3"`}, nil},
		{[]string{"veil_vdisk_allocated_bytes{", `"d3"`}, nil},
		{[]string{"veil_vdisk_snapshots{"}, []string{"2", "0"}},
		{[]string{"veil_vdisk_info{", `bus="scsi"`, `type="raw"`, `"d4"`}, []string{"1"}},
		{[]string{"veil_vdisk_info{"}, []string{"1", "1", "1", "1", "1"}},
		{[]string{"veil_datapool_provisioned_bytes{", `"p1"`}, []string{fmtFloat(10 * gib)}},
		{[]string{"veil_datapool_provisioned_bytes{", `"p2"`}, []string{fmtFloat(6 * gib)}},
		{[]string{"veil_domain_interface_up{"}, []string{"1", "0"}},
		{[]string{"veil_domain_interface_info{", `mac="52:54:00:aa:00:01"`}, []string{"1"}},
		{[]string{"veil_domain_interface_info{"}, []string{"1", "1", "1"}},
	} {
		var got []string
		for _, s := range series(t, inv, tc.subs...) {
			got = append(got, s[strings.LastIndexByte(s, ' ')+1:])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%q: got %q, want %q", tc.subs, got, tc.want)
		}
	}
	if s := series(t, inv, `interface_id="n4"`); len(s) != 0 {
		t.Errorf("an interface of no VM exported: %q", s)
	}
}

// simDetail reads one object's detail from the simulator over plain HTTP.
func simDetail(t *testing.T, sim *veiltest.Server, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", sim.URL+path, nil)
	req.Header.Set("Authorization", "jwt "+sim.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return out
}

// TestDeviceDetailsFillWhatTheListsLack: with collect.device_details_interval, every disk's
// bus, type and snapshot count and every interface's link state are read from the details (one
// request each per sweep) and exported as the details say; a sweep whose reads fail keeps what
// the last one read and says so in its run status.
func TestDeviceDetailsFillWhatTheListsLack(t *testing.T) {
	cc := testCollect()
	cc.DeviceDetailsInterval = 500 * time.Millisecond // the config's floor is 1m; the sweep's pace is what is tested
	f := newFixture(t, veiltest.Options{Seed: 7, Nodes: 2, Datapools: 3, VMs: 12, Templates: -1}, cc, veil.Config{MaxRetries: 1})
	f.mustRefresh(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.inv.Store.Run(ctx) }()
	defer func() { cancel(); <-done }()
	disks, nics := simList(t, f.sim, "/api/vdisks/"), simList(t, f.sim, "/api/vmachine-infs/")
	testutil.Eventually(t, 20*time.Second, func() bool {
		return !runOf(t, f.inv, collDetails).LastSuccess.IsZero() &&
			len(series(t, f.inv, "veil_vdisk_snapshots")) == len(disks) && len(series(t, f.inv, "veil_domain_interface_up")) == len(nics)
	}, "a whole detail sweep")
	up, down, snapped := 0, 0, 0
	for _, k := range disks {
		id := k["id"].(string)
		d := simDetail(t, f.sim, "/api/vdisks/"+id+"/")
		want := fmt.Sprintf(`bus=%q`, d["target_bus"])
		if s := series(t, f.inv, `vdisk_id="`+id+`"`, "veil_vdisk_info"); len(s) != 1 || !strings.Contains(s[0], want) || !strings.Contains(s[0], fmt.Sprintf(`type=%q`, d["disk_type"])) {
			t.Errorf("disk %s info %q, want %s and type=%q", id, s, want, d["disk_type"])
		}
		n := len(d["snapshots"].([]any))
		if n > 0 {
			snapped++
		}
		if v := value(t, f.inv, "veil_vdisk_snapshots{", `vdisk_id="`+id+`"`); v != strconv.Itoa(n) {
			t.Errorf("disk %s snapshots %s, the detail lists %d", id, v, n)
		}
	}
	for _, n := range nics {
		id := n["id"].(string)
		want := map[string]string{"up": "1", "down": "0"}[simDetail(t, f.sim, "/api/vmachine-infs/"+id+"/")["link_state"].(string)]
		if want == "1" {
			up++
		} else {
			down++
		}
		if v := value(t, f.inv, "veil_domain_interface_up{", `interface_id="`+id+`"`); v != want {
			t.Errorf("interface %s up %s, want %s", id, v, want)
		}
	}
	t.Logf("%d disks (%d with snapshots), %d interfaces (%d up, %d down)", len(disks), snapped, len(nics), up, down)
	// The status page's "what is wrong" lists each interface whose link is down, by VM name, not as a failure.
	listed := 0
	for _, p := range f.inv.problems() {
		if p.Kind != "nic" {
			continue
		}
		listed++
		if v := value(t, f.inv, "veil_domain_interface_up{", `interface_id="`+p.ID+`"`); v != "0" || p.State != "link down" || p.Failure || p.Name == "" {
			t.Errorf("problem %+v: interface up %s, want a link down (not a failure) by name", p, v)
		}
	}
	if listed != down {
		t.Errorf("%d interfaces listed as problems, %d are down", listed, down)
	}
	if down == 0 || up == 0 {
		t.Fatalf("the simulator's interfaces are all up or all down (%d up, %d down): the test would not tell them apart", up, down)
	}

	// Details failing: the sweep says so and the last values stay.
	before := len(series(t, f.inv, "veil_domain_interface_up"))
	f.sim.SetFaults(veiltest.Fault{Path: "/api/vmachine-infs/*/", Kind: "status", Status: 500})
	testutil.Eventually(t, 20*time.Second, func() bool {
		r := runOf(t, f.inv, collDetails)
		return !r.Success && strings.Contains(r.Error, "500")
	}, "a sweep whose interface reads fail to say so")
	if after := len(series(t, f.inv, "veil_domain_interface_up")); after != before {
		t.Errorf("%d link states after failed reads, %d before: want them kept", after, before)
	}
	f.sim.ClearFaults()

}

// TestNoDeviceDetailsByDefault: without collect.device_details_interval no detail is read and
// the sweep has no run status.
func TestNoDeviceDetailsByDefault(t *testing.T) {
	g := newFixture(t, veiltest.Options{Seed: 7, VMs: 4, Templates: -1}, testCollect(), veil.Config{})
	g.mustRefresh(t)
	for _, r := range g.sim.Requests() {
		if strings.Count(strings.Trim(r.Path, "/"), "/") > 1 && (strings.HasPrefix(r.Path, "/api/vdisks/") || strings.HasPrefix(r.Path, "/api/vmachine-infs/")) {
			t.Errorf("detail read while off: %s", r.Path)
		}
	}
	for _, st := range g.inv.RunStatus() {
		if st.Collector == collDetails {
			t.Errorf("a %s run status while off", collDetails)
		}
	}
}
