package changefeed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/config"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

const bucket = "INV_TEST"

// rig is one controller (the simulator) and a NATS server; run starts an exporter's part of it:
// an inventory, its push feed and a writer, stopped by the returned function.
type rig struct {
	sim  *veiltest.Server
	nats *tu.NATS
	conn *natsconn.Conn
	logs *tu.SyncBuffer
	// fence, when set, is the writers' fence (the lease, with replicas).
	fence func() bool
}

func newRig(t *testing.T, opts veiltest.Options) *rig {
	t.Helper()
	opts.ChangeLog = 100_000
	sim := veiltest.New(opts)
	t.Cleanup(sim.Close)
	n := tu.StartNATS(t)
	cfg := config.Default().NATS
	cfg.URL = n.URL()
	logs := &tu.SyncBuffer{}
	conn, err := natsconn.Connect(cfg, log.NewLogfmtLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &rig{sim: sim, nats: n, conn: conn, logs: logs}
}

// exporter is what run started.
type exporter struct {
	inv  *inventory.Store
	feed *inventory.PushFeed
	w    *changefeed.Writer
	stop func()
}

func (r *rig) run(t *testing.T, interval time.Duration) *exporter {
	t.Helper()
	client, err := veil.New(veil.Config{URL: r.sim.URL, Token: r.sim.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	cc := config.Default().Collect
	cc.Interval, cc.ResyncInterval = interval, time.Hour
	logger := log.NewLogfmtLogger(r.logs)
	inv, err := inventory.NewStore("sim", client, cc, logger)
	if err != nil {
		t.Fatal(err)
	}
	ic := config.Default().NATS.Inventory
	ic.Bucket, ic.History = bucket, 64
	w, err := changefeed.New(changefeed.Options{Controller: "sim", Conn: r.conn, Config: ic, Resync: inv.Resync, Fence: r.fence, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	inv.SetObserver(w)
	feed := inventory.NewPushFeed("sim", client, inv, time.Hour, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	for _, f := range []func(context.Context){inv.Run, feed.Run, w.Run} {
		go func() { f(ctx); done <- struct{}{} }()
	}
	e := &exporter{inv: inv, feed: feed, w: w}
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			<-done
			<-done
		}
	}
	t.Cleanup(e.stop)
	return e
}

// listed is what the simulator lists now, by key, each object in canonical form.
func (r *rig) listed(t *testing.T) map[string]string {
	t.Helper()
	client, err := veil.New(veil.Config{URL: r.sim.URL, Token: r.sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for class, path := range map[string]string{"node": "/api/nodes/", "cluster": "/api/clusters/", "datapool": "/api/data-pools/", "domain": "/api/domains/"} {
		page, err := veil.ListPage[json.RawMessage](context.Background(), client, veil.PageRequest{Path: path, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Results {
			var o struct {
				ID string `json:"id"`
			}
			json.Unmarshal(raw, &o)
			out["sim."+class+"."+o.ID] = canon(t, raw)
		}
	}
	return out
}

// stored is what the bucket holds now, by key.
func stored(t *testing.T, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]string{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = string(e.Value())
	}
	return out
}

// canon is an independent canonical form: the JSON decoded with numbers as written and encoded
// again (Go sorts object keys).
func canon(t *testing.T, b []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return strings.TrimSpace(out.String())
}

func equalMaps(a, b map[string]string) string {
	var diff []string
	for k, v := range a {
		if b[k] != v {
			diff = append(diff, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			diff = append(diff, k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 5 {
		diff = append(diff[:5], fmt.Sprintf("and %d more", len(diff)-5))
	}
	return strings.Join(diff, ", ")
}

func inBucket(t *testing.T, r *rig, kv jetstream.KeyValue) func() bool {
	return func() bool { return equalMaps(r.listed(t), stored(t, kv)) == "" }
}

func writes(t *testing.T, w *changefeed.Writer, change string) float64 {
	t.Helper()
	return counter(t, w, "veil_inventory_kv_writes_total", change)
}

func counter(t *testing.T, c prometheus.Collector, name, label string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			ok := label == ""
			for _, l := range m.Label {
				if l.GetName() != "controller" && l.GetValue() == label {
					ok = true
				}
			}
			if ok {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no %s %s", name, label)
	return 0
}

// change is one stored value of a key: its operation and value.
type change struct {
	op, value string
}

// history is a key's stored values, oldest first.
func history(t *testing.T, kv jetstream.KeyValue, key string) []change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []change
	es, err := kv.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		out = append(out, change{op: e.Operation().String(), value: string(e.Value())})
	}
	return out
}

// TestTheBucketFollowsTheController: the bucket holds every object the controller lists, as it
// lists it; every change the simulator made after that (power, migration, node status, a VM
// created and one deleted) is in the history of its key once and in order, written from the
// push, with headers that say what changed.
func TestTheBucketFollowsTheController(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 5, VMs: 8})
	e := r.run(t, time.Hour)
	tu.Eventually(t, 20*time.Second, func() bool { return e.feed.Status().Mode == inventory.PushModePush }, "push mode")
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory")
	mark := r.sim.Summary().Changes
	ids := vms(r.sim)
	toggle(t, r.sim, ids[0])
	toggle(t, r.sim, ids[0])
	toggle(t, r.sim, ids[1])
	nodes := r.sim.NodeIDs()
	d2, _ := r.sim.Domain(ids[2])
	to := nodes[0]
	if to == d2.NodeID {
		to = nodes[1]
	}
	if err := r.sim.MigrateVM(ids[2], to); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.SetNodeStatus(nodes[2], "SERVICE"); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.DeleteVM(ids[3]); err != nil {
		t.Fatal(err)
	}
	added := r.sim.AddVMs(1)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to follow the changes")

	// Per key, the values stored after the mark are the simulator's changes after it, each once.
	want := storedSince(t, r.sim, mark)
	if len(want[key(ids[0])]) < 2 || want[key(ids[3])][len(want[key(ids[3])])-1] != "DEL" || len(want[key(added[0])]) == 0 {
		t.Fatalf("the simulator's change log lacks the changes made: %v", want)
	}
	for k, vals := range want {
		h := history(t, kv, k)
		var got []string
		for _, c := range h {
			v := c.value
			if c.op != "KeyValuePutOp" {
				v = "DEL"
			}
			got = append(got, v)
		}
		// The history ends with the changes made after the mark (a created key begins with them).
		if len(got) < len(vals) || strings.Join(got[len(got)-len(vals):], "\n") != strings.Join(vals, "\n") {
			t.Errorf("%s: stored\n%s\nwant it to end with\n%s", k, strings.Join(got, "\n"), strings.Join(vals, "\n"))
		}
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				t.Errorf("%s: the same value stored twice in a row: %s", k, got[i])
			}
		}
	}
	// Headers, read from the bucket's stream as a subscriber would.
	hs := headers(t, r, "sim.domain."+ids[2])
	last := hs[len(hs)-1]
	if last.Get(changefeed.HeaderChange) != changefeed.Updated || last.Get(changefeed.HeaderSource) != changefeed.SourcePush || !strings.Contains(last.Get(changefeed.HeaderFields), "node") {
		t.Errorf("the migration's headers: %v", last)
	}
	hs = headers(t, r, "sim.domain."+ids[3])
	if last := hs[len(hs)-1]; last.Get(changefeed.HeaderChange) != changefeed.Deleted || last.Get("KV-Operation") != "DEL" {
		t.Errorf("the deletion's headers: %v", last)
	}
	hs = headers(t, r, "sim.domain."+added[0])
	if first := hs[0]; first.Get(changefeed.HeaderChange) != changefeed.Created || first.Get(changefeed.HeaderSource) != changefeed.SourcePush {
		t.Errorf("the creation's headers: %v", first)
	}
}

func key(id string) string { return "sim.domain." + id }

// TestRestartWritesOnlyWhatChanged: an exporter started again over an up-to-date bucket writes
// nothing; a VM changed while no exporter ran is written once, from the listing.
func TestRestartWritesOnlyWhatChanged(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 6, VMs: 20, NoPush: true})
	e := r.run(t, time.Hour)
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory")
	e.stop()

	again := r.run(t, time.Hour)
	tu.Eventually(t, 20*time.Second, func() bool {
		st := again.w.Status()
		return st.Loaded && st.Pending == 0 && again.inv.Ready()
	}, "the second exporter's first listing written")
	for _, c := range []string{changefeed.Created, changefeed.Updated, changefeed.Deleted} {
		if n := writes(t, again.w, c); n != 0 {
			t.Errorf("a restart over an up-to-date bucket wrote %v %s", n, c)
		}
	}
	again.stop()

	vm := vms(r.sim)[0]
	was := r.listed(t)
	toggle(t, r.sim, vm)
	now := r.listed(t)
	changed := 0 // the VM, and its node's counts
	for k, v := range now {
		if was[k] != v {
			changed++
		}
	}
	if changed < 1 || was[key(vm)] == now[key(vm)] {
		t.Fatalf("%d objects changed, the VM among them: %v", changed, was[key(vm)] != now[key(vm)])
	}
	before := len(history(t, kv, key(vm)))
	third := r.run(t, time.Hour)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the change made while down to be written")
	if n := writes(t, third.w, changefeed.Updated); n != float64(changed) {
		t.Errorf("%v updates written, want the %d objects changed while down", n, changed)
	}
	if n := len(history(t, kv, key(vm))); n != before+1 {
		t.Errorf("the VM's history grew from %d to %d values, want one more", before, n)
	}
	hs := headers(t, r, key(vm))
	if s := hs[len(hs)-1].Get(changefeed.HeaderSource); s != changefeed.SourceRefresh {
		t.Errorf("source %q, want refresh", s)
	}
}

// TestListingDeletesWhatItLacks: on a controller without the push channel, a VM deleted shows
// as a DEL of its key at the next listing.
func TestListingDeletesWhatItLacks(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 7, VMs: 4, NoPush: true})
	r.run(t, 100*time.Millisecond)
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory")
	vm := vms(r.sim)[1]
	if err := r.sim.DeleteVM(vm); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the deletion")
	hs := headers(t, r, key(vm))
	if last := hs[len(hs)-1]; last.Get(changefeed.HeaderChange) != changefeed.Deleted || last.Get(changefeed.HeaderSource) != changefeed.SourceRefresh {
		t.Errorf("headers %v", last)
	}
}

// TestNATSDownChangesWaitAndComeLater: changes made while NATS is down are written when it is
// back, each value once.
func TestNATSDownChangesWaitAndComeLater(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 8, VMs: 6})
	e := r.run(t, time.Hour)
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory")
	r.nats.Stop()
	ids := vms(r.sim)
	toggle(t, r.sim, ids[0])
	if err := r.sim.DeleteVM(ids[1]); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 20*time.Second, func() bool { return counter(t, e.w, "veil_inventory_kv_pending", "") > 0 }, "changes waiting")
	r.nats.Start()
	kv = r.openKVEventually(t)
	tu.Eventually(t, 30*time.Second, inBucket(t, r, kv), "the changes made while NATS was down")
	for _, k := range []string{key(ids[0]), key(ids[1])} {
		h := history(t, kv, k)
		for i := 1; i < len(h); i++ {
			if h[i] == h[i-1] {
				t.Errorf("%s: the same value twice in a row", k)
			}
		}
	}
}

// TestAFencedWriterWaitsForItsLease: while the lease has run out the writer writes nothing and
// counts no error (it is not the bucket failing), and once a renewal regains the lease it writes
// what waited.
func TestAFencedWriterWaitsForItsLease(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 9, VMs: 4})
	var held atomic.Bool
	var asked atomic.Int64
	r.fence = func() bool { asked.Add(1); return held.Load() }
	e := r.run(t, time.Hour)
	tu.Eventually(t, 20*time.Second, func() bool { return counter(t, e.w, "veil_inventory_kv_pending", "") > 0 }, "the listing waiting")
	n := asked.Load()
	tu.Eventually(t, 20*time.Second, func() bool { return asked.Load() >= n+3 }, "the writer to ask the fence again while it waits")
	if w := writes(t, e.w, changefeed.Created); w != 0 {
		t.Errorf("%v keys written while the lease had run out", w)
	}
	if n := counter(t, e.w, "veil_inventory_kv_errors_total", ""); n != 0 {
		t.Errorf("veil_inventory_kv_errors_total = %v while the lease had run out, want 0", n)
	}
	if logs := r.logs.String(); strings.Contains(logs, "couldn't write the inventory bucket") {
		t.Errorf("a run-out lease was logged as a bucket failure:\n%s", logs)
	}
	held.Store(true)
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory once the lease is back")
}

// TestAStaleWriterIsRefused: a key written by someone else since the writer read the bucket
// makes its next write of that key conflict; it reads the bucket back and ends right.
func TestAStaleWriterIsRefused(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 9, VMs: 3})
	e := r.run(t, time.Hour)
	tu.Eventually(t, 20*time.Second, func() bool { return e.feed.Status().Mode == inventory.PushModePush }, "push mode")
	kv := r.openKVEventually(t)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket to hold the inventory")
	vm := vms(r.sim)[0]
	if _, err := kv.Put(context.Background(), key(vm), []byte(`{"id":"`+vm+`","written":"by another"}`)); err != nil {
		t.Fatal(err)
	}
	toggle(t, r.sim, vm)
	tu.Eventually(t, 20*time.Second, inBucket(t, r, kv), "the bucket right again")
	if n := counter(t, e.w, "veil_inventory_kv_conflicts_total", ""); n < 1 {
		t.Errorf("conflicts %v, want 1 or more", n)
	}
}

// openKVEventually opens the bucket once a writer has created it.
func (r *rig) openKVEventually(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js := tu.JetStream(t, r.nats.URL())
	var kv jetstream.KeyValue
	tu.Eventually(t, 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		kv, err = js.KeyValue(ctx, bucket)
		return err == nil
	}, "the bucket to be created")
	return kv
}

// headers reads the headers of every stored value of key from the bucket's stream, oldest
// first, as a subscriber of the stream would.
func headers(t *testing.T, r *rig, key string) []nats.Header {
	t.Helper()
	js := tu.JetStream(t, r.nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"$KV." + bucket + "." + key}})
	if err != nil {
		t.Fatal(err)
	}
	var out []nats.Header
	for {
		msgs, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			out = append(out, m.Headers())
		}
		if n == 0 {
			break
		}
	}
	if len(out) == 0 {
		t.Fatalf("no value of %s in the stream", key)
	}
	return out
}

// vms are the simulator's VMs that are not templates (which cannot be powered on).
func vms(sim *veiltest.Server) []string {
	var out []string
	for _, id := range sim.DomainIDs() {
		if d, _ := sim.Domain(id); !d.Template {
			out = append(out, id)
		}
	}
	return out
}

// toggle powers a VM on if it is off and off otherwise.
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
}

// TestAListingMustLackAnObjectTwice: one listing without an object (it may have been shifted
// onto a page already read) deletes nothing; the second in a row deletes it. A key deleted
// behind the writer's back (an operator's nats kv del) makes it read the bucket back and write
// the object again.
func TestAListingMustLackAnObjectTwice(t *testing.T) {
	r := newRig(t, veiltest.Options{Seed: 10, VMs: 1})
	ic := config.Default().NATS.Inventory
	ic.Bucket, ic.History = bucket, 64
	w, err := changefeed.New(changefeed.Options{Controller: "sim", Conn: r.conn, Config: ic, Logger: log.NewLogfmtLogger(r.logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	obj := func(id string) inventory.RawObject {
		return inventory.RawObject{ID: id, JSON: json.RawMessage(`{"id":"` + id + `","verbose_name":"vm-` + id + `"}`)}
	}
	idle := func() bool { return w.Status().Loaded && w.Status().Pending == 0 }
	w.Listed("domain", []inventory.RawObject{obj("a"), obj("b")})
	kv := r.openKVEventually(t)
	tu.Eventually(t, 10*time.Second, func() bool { return idle() && len(stored(t, kv)) == 2 }, "a and b written")
	w.Listed("domain", []inventory.RawObject{obj("a")})
	tu.Eventually(t, 10*time.Second, idle, "the second listing written")
	if _, ok := stored(t, kv)["sim.domain.b"]; !ok {
		t.Fatal("b deleted after one listing lacked it")
	}
	w.Listed("domain", []inventory.RawObject{obj("a")})
	tu.Eventually(t, 10*time.Second, func() bool { _, ok := stored(t, kv)["sim.domain.b"]; return idle() && !ok }, "b deleted after two listings lacked it")

	if err := kv.Delete(context.Background(), "sim.domain.a"); err != nil {
		t.Fatal(err)
	}
	changed := obj("a")
	changed.JSON = json.RawMessage(`{"id":"a","verbose_name":"renamed"}`)
	w.Pushed("domain", changed, false)
	tu.Eventually(t, 20*time.Second, func() bool { return stored(t, kv)["sim.domain.a"] == `{"id":"a","verbose_name":"renamed"}` }, "a written again after the operator's delete")
}

// storedSince is, per key, the values the bucket must have stored for the simulator's changes
// after mark, in order, each once ("DEL" for a deletion).
func storedSince(t *testing.T, sim *veiltest.Server, mark uint64) map[string][]string {
	t.Helper()
	want := map[string][]string{}
	for _, c := range sim.Changes(mark) {
		class := map[string]string{"/domains/": "domain", "/nodes/": "node", "/data-pools/": "datapool", "/clusters/": "cluster"}[c.Resource]
		if class == "" {
			continue
		}
		k := "sim." + class + "." + c.ID
		v := canon(t, c.Object)
		if c.Event == veiltest.ChangeDeleted {
			v = "DEL"
		}
		if l := want[k]; len(l) > 0 && l[len(l)-1] == v {
			continue // the same value again: nothing to store
		}
		want[k] = append(want[k], v)
	}
	return want
}
