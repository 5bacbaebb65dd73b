package collector

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// pushCollect polls only every hour: what the inventory learns within a test came by the push
// (or by the refresh that follows each connect).
func pushCollect() (c config.Collect) {
	c = testCollect()
	c.Interval, c.ResyncInterval = time.Hour, time.Hour
	return c
}

// runFeed starts the inventory's loop and its push feed until the test ends.
func runFeed(t *testing.T, f *fixture) *inventory.PushFeed {
	t.Helper()
	feed := inventory.NewPushFeed("test", f.client, f.inv.Store, time.Hour, log.NewLogfmtLogger(f.logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { f.inv.Run(ctx); done <- struct{}{} }()
	go func() { feed.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return feed
}

func domainOf(inv testInventory, id string) (veil.Domain, bool) {
	for _, d := range inv.Domains() {
		if d.ID == id {
			return *d, true
		}
	}
	return veil.Domain{}, false
}

// inSync says whether the inventory's VMs are the simulator's: the same ids with the same
// power state and node.
func inSync(t *testing.T, f *fixture) bool {
	t.Helper()
	ids := f.sim.DomainIDs()
	if len(f.inv.Domains()) != len(ids) {
		return false
	}
	for _, id := range ids {
		want, _ := f.sim.Domain(id)
		got, ok := domainOf(f.inv, id)
		if !ok || int(got.UserPowerState) != want.PowerState || got.Node.ID != want.NodeID {
			return false
		}
	}
	return true
}

// TestPushKeepsTheInventoryFresh: with a refresh only every hour, a VM powered off, one
// migrated, one created and one deleted on the controller show in the inventory (and in its
// rendered series) through the push alone; the feed says it runs in push mode.
func TestPushKeepsTheInventoryFresh(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 7, VMs: 6}, pushCollect(), veil.Config{})
	feed := runFeed(t, f)
	tu.Eventually(t, 10*time.Second, func() bool { return settled(f, feed) }, "push mode and the refresh after the connect")
	if v := testutil.ToFloat64(metricOf(t, feed, "veil_push_mode", `mode="push"`)); v != 1 {
		t.Errorf("veil_push_mode{mode=push} = %v", v)
	}
	ids := f.sim.DomainIDs()
	if !inSync(t, f) {
		t.Fatal("not in sync after the refresh that follows the connect")
	}
	// The domains were listed at the start and after the connect: twice, or once when the
	// socket opened before the first refresh began.
	listings := countRequests(f.sim, "/api/domains/")
	if listings != 1 && listings != 2 {
		t.Errorf("%d listings of /api/domains/ by the refresh after the connect, want 1 or 2", listings)
	}
	toggle(t, f.sim, ids[0])
	nodes := f.sim.NodeIDs()
	d1, _ := f.sim.Domain(ids[1])
	target := nodes[0]
	if target == d1.NodeID {
		target = nodes[1]
	}
	if err := f.sim.MigrateVM(ids[1], target); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.DeleteVM(ids[2]); err != nil {
		t.Fatal(err)
	}
	added := f.sim.AddVMs(1)
	tu.Eventually(t, 10*time.Second, func() bool { return inSync(t, f) }, "the pushed changes applied")
	if _, ok := domainOf(f.inv, added[0]); !ok {
		t.Fatal("the new VM is not in the inventory")
	}
	// Kept sorted by id through pushes (renders rely on it to sort nothing).
	if !slices.IsSortedFunc(f.inv.Domains(), func(a, b *veil.Domain) int { return strings.Compare(a.ID, b.ID) }) {
		t.Error("the inventory's VMs are not sorted by id after the pushes")
	}
	tu.Eventually(t, 10*time.Second, func() bool {
		return len(series(t, f.inv, "veil_domain_info", added[0])) == 1 && len(series(t, f.inv, "veil_domain_info", ids[2])) == 0
	}, "the rendered series to follow")
	if st := f.inv.Status(); st.DomainsTotal != len(f.sim.DomainIDs()) {
		t.Errorf("VMs in all %d, want %d", st.DomainsTotal, len(f.sim.DomainIDs()))
	}
	if feed.Status().Frames == 0 {
		t.Error("no frame counted")
	}
	// Never listed since: the push did the rest.
	if n := countRequests(f.sim, "/api/domains/"); n != listings {
		t.Errorf("%d listings of /api/domains/, %d when the push began: want none since", n, listings)
	}
}

// TestPushLostFramesAreMendedByTheReconnect: frames lost silently leave the inventory behind
// until the socket drops; the reconnect's refresh then brings it back in line, and the feed
// counted the connects.
func TestPushLostFramesAreMendedByTheReconnect(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 8, VMs: 4}, pushCollect(), veil.Config{})
	feed := runFeed(t, f)
	tu.Eventually(t, 10*time.Second, func() bool { return settled(f, feed) }, "push mode and the refresh after the connect")
	// Every domain frame is lost from now on; node frames still come, in order with them.
	f.sim.SetFaults(veiltest.Fault{Kind: "ws_lose", Path: "/domains/"})
	lost := f.sim.DomainIDs()[0]
	toggle(t, f.sim, lost)
	node := f.sim.NodeIDs()[0]
	if err := f.sim.SetNodeStatus(node, "SERVICE"); err != nil {
		t.Fatal(err)
	}
	nodeStatus := func() string {
		for _, n := range f.inv.Snapshot().Nodes {
			if n.ID == node {
				return n.Status
			}
		}
		return ""
	}
	tu.Eventually(t, 10*time.Second, func() bool { return nodeStatus() == "SERVICE" }, "the node's frame")
	if inSync(t, f) {
		t.Fatal("in sync although the VM's frames were lost: the test proves nothing")
	}
	if f.sim.DropPushSockets() == 0 {
		t.Fatal("no socket to drop")
	}
	// The domain frames are still lost: only the refresh after the reconnect can mend it.
	tu.Eventually(t, 20*time.Second, func() bool { return inSync(t, f) }, "the refresh after the reconnect")
	f.sim.ClearFaults()
	if v := testutil.ToFloat64(metricOf(t, feed, "veil_push_connects_total", "")); v < 2 {
		t.Errorf("veil_push_connects_total = %v, want 2 or more", v)
	}
}

// TestNoPushChannelMeansPolling: a controller without /ws/ is polled as before; the feed says
// so once and shows polling.
func TestNoPushChannelMeansPolling(t *testing.T) {
	c := testCollect()
	c.Interval = 50 * time.Millisecond
	f := newFixture(t, veiltest.Options{Seed: 9, VMs: 3, NoPush: true}, c, veil.Config{})
	feed := runFeed(t, f)
	tu.Eventually(t, 10*time.Second, func() bool { return feed.Status().Mode == inventory.PushModePolling && f.inv.Ready() }, "polling mode")
	vm := f.sim.DomainIDs()[0]
	if err := f.sim.PowerOff(vm); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 10*time.Second, func() bool { return inSync(t, f) }, "the poll to see the change")
	if n := strings.Count(f.logs.String(), `msg="controller has no push channel`); n != 1 {
		t.Errorf("%d lines saying there is no push channel, want 1:\n%s", n, f.logs.String())
	}
	if st := feed.RunStatus()[0]; st.Success || !st.Unavailable {
		t.Errorf("run status %+v, want unavailable", st)
	}
}

// TestBadFramesAreCountedNotApplied: a controller sending frames that are not JSON, of an
// unknown event or resource, without an id, or with an object that does not decode: each is
// counted by reason, the good frame between them is applied, and the inventory never holds an
// object of a bad frame.
func TestBadFramesAreCountedNotApplied(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 10, VMs: 2, NoPush: true})
	t.Cleanup(sim.Close)
	vm := sim.DomainIDs()[0]
	good, _ := json.Marshal(map[string]any{"msg_type": "data", "resource": "/domains/", "event": "UPDATED", "id": vm,
		"object": map[string]any{"id": vm, "verbose_name": "renamed-by-push", "status": "ACTIVE", "user_power_state": 1}})
	frames := []string{
		`not json at all`,
		`{"msg_type":"data","resource":"/domains/","event":"EXPLODED","id":"x","object":{"id":"x"}}`,
		`{"msg_type":"data","resource":"/domains/","event":"UPDATED","object":{"verbose_name":"no id"}}`,
		`{"msg_type":"data","resource":"/galaxies/","event":"UPDATED","id":"g","object":{"id":"g"}}`,
		`{"msg_type":"data","resource":"/domains/","event":"UPDATED","id":"d","object":{"id":"d","user_power_state":{"no":"number"}}}`,
		`{"msg_type":"data","resource":"/domains/","event":"UPDATED","id":"e","object":{"id":"other"}}`,
		`{"msg_type":"control","text":"add /domains/"}`,
		string(good),
	}
	sendBig := make(chan struct{})
	var conns atomic.Int32
	mux := badFramesController(frames, sendBig, &conns)
	f := withPushChannel(t, sim, mux)
	inv := f.inv
	feed := runFeed(t, f)
	want := map[string]float64{"not_json": 1, "unknown_event": 1, "no_id": 1, "unknown_resource": 1, "bad_object": 2, "too_large": 1}
	tu.Eventually(t, 10*time.Second, func() bool {
		d, ok := domainOf(inv, vm)
		return ok && d.VerboseName == "renamed-by-push" && testutil.ToFloat64(metricOf(t, feed, "veil_push_frames_total", "")) == 1
	}, "the good frame applied")
	// A frame over the limit ends the socket: counted, and the feed connects again.
	close(sendBig)
	tu.Eventually(t, 10*time.Second, func() bool {
		return testutil.ToFloat64(metricOf(t, feed, "veil_push_frames_dropped_total", `reason="too_large"`)) == 1 && conns.Load() == 2
	}, "the big frame refused and the socket opened again")
	for reason, n := range want {
		if got := testutil.ToFloat64(metricOf(t, feed, "veil_push_frames_dropped_total", `reason="`+reason+`"`)); got != n {
			t.Errorf("dropped %s: %v, want %v", reason, got, n)
		}
	}
	for _, id := range []string{"x", "d", "e", "g", "other"} {
		if _, ok := domainOf(inv, id); ok {
			t.Errorf("the inventory holds %s from a bad frame", id)
		}
	}
	// Each frame that does not decode is an object rejected, said once with what was wrong.
	for labels, n := range map[string]float64{
		`collection="push",reason="decode"`:        1, // not JSON
		`collection="domains",reason="decode"`:     2, // an unknown event; an object with another id
		`collection="domains",reason="missing_id"`: 1,
		`collection="domains",reason="type"`:       1, // user_power_state an object
		`collection="push",reason="over_limit"`:    1, // over 4 MiB
	} {
		if got := testutil.ToFloat64(metricOf(t, f.api, "veil_objects_rejected_total", labels)); got != n {
			t.Errorf("veil_objects_rejected_total{%s} = %v, want %v", labels, got, n)
		}
	}
	logs := f.logs.String()
	for _, want := range []string{`collection=domains reason=type id=d field=user_power_state`, `collection=push reason=decode`} {
		if strings.Count(logs, want) != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", want, strings.Count(logs, want), logs)
		}
	}
}

// badFramesController is a controller's /ws/ that sends frames on its first socket, then one
// frame over veil.MaxPushFrame once sendBig is closed; later sockets stay open and silent.
// conns counts the sockets opened.
func badFramesController(frames []string, sendBig <-chan struct{}, conns *atomic.Int32) *http.ServeMux {
	big := `{"msg_type":"data","resource":"/domains/","event":"UPDATED","id":"big","object":{"id":"big","description":"` + strings.Repeat("x", veil.MaxPushFrame) + `"}}`
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		go func() { // the subscriptions, and the pongs to the client's pings
			for {
				if _, _, err := c.Read(r.Context()); err != nil {
					return
				}
			}
		}()
		if conns.Add(1) > 1 {
			<-r.Context().Done() // later sockets stay open and silent
			return
		}
		for _, fr := range frames {
			if c.Write(r.Context(), websocket.MessageText, []byte(fr)) != nil {
				return
			}
		}
		select {
		case <-sendBig:
			c.Write(r.Context(), websocket.MessageText, []byte(big))
		case <-r.Context().Done():
		}
		<-r.Context().Done()
	})
	return mux
}

// settled says the feed is in push mode and the refresh that follows its connect has finished:
// from then on only frames change the pushed collections.
func settled(f *fixture, feed *inventory.PushFeed) bool {
	st := feed.Status()
	return st.Mode == inventory.PushModePush && f.inv.Status().LastAttempt.After(st.Since)
}

// toggle powers a VM on if it is off and off otherwise: a change whatever its state.
func toggle(t *testing.T, sim *veiltest.Server, id string) {
	t.Helper()
	d, _ := sim.Domain(id)
	change := sim.PowerOff
	if d.PowerState == 1 {
		change = sim.PowerOn
	}
	if err := change(id); err != nil {
		t.Fatal(err)
	}
	if after, _ := sim.Domain(id); after.PowerState == d.PowerState {
		t.Fatalf("VM %s: power state %d unchanged", id, d.PowerState)
	}
}

// metricOf picks the one metric of c of that name with the label name="value" ("": any).
func metricOf(t *testing.T, c prometheus.Collector, name, label string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	go func() { c.Collect(ch); close(ch) }()
	var found prometheus.Metric
	for m := range ch {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) && (label == "" || hasLabel(t, m, label)) {
			found = m
		}
	}
	if found == nil {
		t.Fatalf("no %s{%s}", name, label)
	}
	return constCollector{found}
}

type constCollector struct{ m prometheus.Metric }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.Desc() }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

func hasLabel(t *testing.T, m prometheus.Metric, label string) bool {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	for _, want := range strings.Split(label, ",") { // each of name="value",...
		if !slices.ContainsFunc(d.Label, func(l *dto.LabelPair) bool { return l.GetName()+`="`+l.GetValue()+`"` == want }) {
			return false
		}
	}
	return true
}

// countRequests counts the GET requests the simulator served on a path.
func countRequests(sim *veiltest.Server, path string) int {
	n := 0
	for _, r := range sim.Requests() {
		if r.Method == http.MethodGet && r.Path == path {
			n++
		}
	}
	return n
}

// withPushChannel is an inventory of a controller whose /ws/ is mux's and whose REST API is
// the simulator's.
func withPushChannel(t *testing.T, sim *veiltest.Server, mux *http.ServeMux) *fixture {
	t.Helper()
	mux.Handle("/", sim.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	logs := &tu.SyncBuffer{}
	api := NewAPIMetrics("test", log.NewLogfmtLogger(logs))
	client, err := veil.New(veil.Config{URL: srv.URL, Token: sim.Token, MaxRetries: -1, Observer: api.Observe, Rejected: api.Rejected})
	if err != nil {
		t.Fatal(err)
	}
	store, err := inventory.NewStore("test", client, pushCollect(), log.NewLogfmtLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{sim: sim, client: client, inv: testInventory{store, NewInventory(store, nil)}, logs: logs, api: api}
}

// TestDeviceFamiliesAreKeptWhileNothingTheyShowChanged: a pushed power change re-renders the
// inventory but keeps the disk and interface families as they were (the same Family); a VM
// deleted by the push renders them again, without its disks.
func TestDeviceFamiliesAreKeptWhileNothingTheyShowChanged(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 14, VMs: 4}, pushCollect(), veil.Config{})
	f.mustRefresh(t)
	family := func(name string) *exposition.Family {
		for _, fam := range f.rendered(t).Families {
			if fam.Name == name {
				return fam
			}
		}
		t.Fatalf("no %s rendered", name)
		return nil
	}
	before := family("veil_vdisk_info")
	var vm veil.Domain
	for _, d := range f.inv.Domains() {
		if len(series(t, f.inv, "veil_vdisk_info", d.ID)) > 0 {
			vm = *d
			break
		}
	}
	if vm.ID == "" {
		t.Fatal("no VM with disks")
	}
	obj, _ := json.Marshal(map[string]any{"id": vm.ID, "verbose_name": vm.VerboseName, "status": "ACTIVE", "user_power_state": 1})
	f.inv.Apply([]veil.PushFrame{{Resource: "/domains/", Event: veil.PushUpdated, ID: vm.ID, Object: obj}})
	if after := family("veil_vdisk_info"); after != before {
		t.Error("a power change rendered the disk families again")
	}
	f.inv.Apply([]veil.PushFrame{{Resource: "/domains/", Event: veil.PushDeleted, ID: vm.ID}})
	if after := family("veil_vdisk_info"); after == before {
		t.Error("a VM deleted kept the disk families that list its disks")
	}
	if s := series(t, f.inv, "veil_vdisk_info", vm.ID); len(s) != 0 {
		t.Errorf("the deleted VM's disks are still exported: %q", s)
	}
}
