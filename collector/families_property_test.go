package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestPatchedRenderIsARenderFromScratch: for every field of the objects the inventory renders
// (found by reflection: a field added later is covered without a change here), changed one at a
// time and in random batches, the render that keeps and patches the last render's families is
// byte for byte a render of the same snapshot from scratch, in the text format, OpenMetrics
// and protobuf, plain (and gzip, decompressed, at every fifth). VMs and nodes change as a pushed change does (Store.Apply);
// disks and interfaces, which only a listing changes, in a snapshot made from the last with
// them changed. VEIL_PROPERTY_CASES sets the cases (default 300), VEIL_PROPERTY_SEED the seed.
func TestPatchedRenderIsARenderFromScratch(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("VEIL_PROPERTY_SEED"), 10, 64); err == nil {
		seed = s
	}
	cases := 300
	if n, err := strconv.Atoi(os.Getenv("VEIL_PROPERTY_CASES")); err == nil && n > 0 {
		cases = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: VEIL_PROPERTY_SEED=%d reproduces it", seed, seed)
		}
	})
	p := newPatchProperty(t, seed)
	kinds := []objectKind{p.domainKind(), p.nodeKind(), p.vdiskKind(), p.ifaceKind()}
	// Every field alone first, then random batches.
	n := 0
	for _, k := range kinds {
		for _, path := range leafPaths(k.typ) {
			p.check(fmt.Sprintf("case %d: %s.%s", n, k.typ.Name(), pathName(k.typ, path)), k, [][]int{path})
			n++
		}
	}
	for ; n < cases; n++ {
		k := kinds[p.rng.IntN(len(kinds))]
		paths := leafPaths(k.typ)
		batch := make([][]int, 1+p.rng.IntN(5))
		for i := range batch {
			batch[i] = paths[p.rng.IntN(len(paths))]
		}
		p.check(fmt.Sprintf("case %d: a batch of %d %s changes", n, len(batch), k.typ.Name()), k, batch)
	}
	t.Logf("%d cases, seed %d", n, seed)
}

// patchProperty renders the snapshots it is given against the last one's Set, as the view does
// (the same families' render, the previous Set its cache's), with a renderer that prepares
// every format.
type patchProperty struct {
	t        *testing.T
	rng      *rand.Rand
	f        *fixture
	fams     *inventoryFamilies
	r        *exposition.Renderer
	cache    *exposition.Cache
	cur      *inventory.Snapshot // what the next render renders
	rendered chan struct{}
	checks   int
}

func newPatchProperty(t *testing.T, seed uint64) *patchProperty {
	f := newFixture(t, veiltest.Options{Seed: 21, VMs: 40, Nodes: 6, Datapools: 3, Clusters: 2, InitialTasks: 80}, pushCollect(), veil.Config{})
	f.mustRefresh(t)
	p := &patchProperty{t: t, rng: rand.New(rand.NewPCG(seed, 52)), f: f, fams: f.inv.fams, r: exposition.NewRenderer(), rendered: make(chan struct{}, 1)}
	p.cur = f.inv.Snapshot()
	if p.cur.Vdisks == nil || p.cur.Interfaces == nil || len(p.cur.Backups()) == 0 {
		t.Fatal("the inventory lacks disks, interfaces or backups: the property would prove little")
	}
	p.cache = exposition.NewCache(p.r, exposition.Pace{}, func(s exposition.Sink) { p.fams.render(s, p.cur) }, func() {
		select {
		case p.rendered <- struct{}{}:
		default:
		}
	})
	<-p.rendered // NewCache's
	// A scrape in each format: the renders then make them ahead, kept blocks' forms included.
	for _, a := range scrapeFormats {
		p.scrape(p.cache.Set(), a, "identity")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// scrapeFormats are the Accept headers of the formats compared.
var scrapeFormats = []string{
	"text/plain; version=0.0.4",
	"application/openmetrics-text;version=1.0.0",
	"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
}

// scrape is what /metrics serves of set in the format accept asks for, decompressed.
func (p *patchProperty) scrape(set *exposition.Set, accept, encoding string) []byte {
	h := exposition.Handler(exposition.HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*exposition.Set { return []*exposition.Set{set} }, Renderer: p.r})
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", encoding)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		p.t.Fatalf("/metrics %q: %d", accept, rec.Code)
	}
	body := rec.Body.Bytes()
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			p.t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			p.t.Fatal(err)
		}
	}
	return body
}

// check makes the changes of batch (a field path each, on a random object of k), renders the
// snapshot they make against the last render and compares that with a render from scratch.
func (p *patchProperty) check(what string, k objectKind, batch [][]int) {
	t := p.t
	t.Helper()
	snap := k.change(batch)
	p.cur = snap
	p.cache.Invalidate()
	<-p.rendered
	patched := p.cache.Set()
	if patched.Source() != snap {
		t.Fatalf("%s: the render shows another snapshot", what)
	}
	fresh := exposition.NewCache(p.r, exposition.Pace{}, func(s exposition.Sink) { p.fams.render(s, snap) }, nil).Set()
	encodings := []string{"identity"}
	if p.checks++; p.checks%5 == 0 { // gzip too at every fifth: decompressing is most of a case
		encodings = append(encodings, "gzip")
	}
	for _, accept := range scrapeFormats {
		for _, enc := range encodings {
			got, want := p.scrape(patched, accept, enc), p.scrape(fresh, accept, enc)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, %s, %s: the patched render differs from one from scratch:\n%s", what, accept, enc, firstDifference(got, want))
			}
		}
	}
}

// firstDifference shows where two bodies first differ.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-200)
	return fmt.Sprintf("at byte %d\n got: %q\nwant: %q", i, got[from:min(len(got), i+200)], want[from:min(len(want), i+200)])
}

// objectKind is a kind of object the inventory renders: its type, and change, which makes the
// changes of a batch (field paths) to random objects of it and returns the snapshot they make.
type objectKind struct {
	typ    reflect.Type
	change func(batch [][]int) *inventory.Snapshot
}

// domainKind changes VMs as the push does: the whole object pushed, as the controller sends it
// (a changed id pushes a VM of its own), a frame per change.
func (p *patchProperty) domainKind() objectKind {
	return objectKind{reflect.TypeFor[veil.Domain](), func(batch [][]int) *inventory.Snapshot {
		vms := p.f.inv.Snapshot().Domains.Slice()
		return pushEdits(p, "/domains/", batch, func() *veil.Domain { return vms[p.rng.IntN(len(vms))] },
			func(d *veil.Domain) string { return d.ID },
			func(snap *inventory.Snapshot, id string) (*veil.Domain, bool) { return snap.Domains.Find(id) })
	}}
}

// nodeKind changes nodes as the push does.
func (p *patchProperty) nodeKind() objectKind {
	return objectKind{reflect.TypeFor[veil.Node](), func(batch [][]int) *inventory.Snapshot {
		nodes := p.f.inv.Snapshot().Nodes
		return pushEdits(p, "/nodes/", batch, func() *veil.Node { return nodes[p.rng.IntN(len(nodes))] },
			func(n *veil.Node) string { return n.ID },
			func(snap *inventory.Snapshot, id string) (*veil.Node, bool) {
				for _, n := range snap.Nodes {
					if n.ID == id {
						return n, true
					}
				}
				return nil, false
			})
	}}
}

// pushEdits makes each change of batch to an object pick chooses (its version this batch made,
// if any), pushes a frame of it after each, and checks that the store holds what was pushed:
// a change the platform's encoding cannot carry would test nothing.
func pushEdits[T any](p *patchProperty, resource string, batch [][]int, pick func() *T, id func(*T) string, find func(*inventory.Snapshot, string) (*T, bool)) *inventory.Snapshot {
	p.t.Helper()
	edited := map[string]*T{} // by id: this batch's versions
	var frames []veil.PushFrame
	for _, path := range batch {
		base := pick()
		o := *base
		if e, ok := edited[id(base)]; ok {
			o = *e
		}
		p.mutate(reflect.ValueOf(&o).Elem(), path)
		if id(&o) == "" {
			continue // an object without an id is not pushed
		}
		edited[id(&o)] = &o
		frames = append(frames, p.frame(resource, id(&o), o))
	}
	if drops := p.f.inv.Apply(frames); len(drops) != 0 {
		p.t.Fatalf("frames dropped: %v", drops)
	}
	snap := p.f.inv.Snapshot()
	for k, want := range edited {
		got, ok := find(snap, k)
		if !ok {
			p.t.Fatalf("the pushed %s %q is not in the store", resource, k)
		}
		if !reflect.DeepEqual(got, want) {
			p.t.Fatalf("the pushed %s reads back otherwise:\n got %+v\nwant %+v", resource, got, want)
		}
	}
	return snap
}

// frame is the pushed frame of object o (a new one when its id is new).
func (p *patchProperty) frame(resource, id string, o any) veil.PushFrame {
	obj, err := platformJSON(o)
	if err != nil {
		p.t.Fatal(err)
	}
	return veil.PushFrame{Resource: resource, Event: veil.PushUpdated, ID: id, Object: obj}
}

// vdiskKind changes disks as a listing does: a snapshot like the last with the disks changed
// (and its device generation moved on).
func (p *patchProperty) vdiskKind() objectKind {
	return objectKind{reflect.TypeFor[inventory.Vdisk](), func(batch [][]int) *inventory.Snapshot {
		rows := append([]inventory.Vdisk(nil), p.cur.Vdisks...)
		for _, path := range batch {
			p.mutate(reflect.ValueOf(&rows[p.rng.IntN(len(rows))]).Elem(), path)
		}
		next := successor(p.cur)
		next.Vdisks = rows
		return next
	}}
}

// ifaceKind changes interfaces as a listing does.
func (p *patchProperty) ifaceKind() objectKind {
	return objectKind{reflect.TypeFor[inventory.Interface](), func(batch [][]int) *inventory.Snapshot {
		rows := append([]inventory.Interface(nil), p.cur.Interfaces...)
		for _, path := range batch {
			p.mutate(reflect.ValueOf(&rows[p.rng.IntN(len(rows))]).Elem(), path)
		}
		next := successor(p.cur)
		next.Interfaces = rows
		return next
	}}
}

// successor is a snapshot with s's contents (its exported fields) whose devices a listing read
// again. It lacks the backups (not exported): its device and backups generations are far from
// any the store makes, so that no snapshot of the store rendered after it has them with other
// devices or backups.
func successor(s *inventory.Snapshot) *inventory.Snapshot {
	return &inventory.Snapshot{
		Gen: s.Gen + 1, Up: s.Up, Refreshed: s.Refreshed,
		Nodes: s.Nodes, Clusters: s.Clusters, Datapools: s.Datapools, Domains: s.Domains,
		DomainsTotal: s.DomainsTotal, DomainsGen: s.DomainsGen, TaskCounts: s.TaskCounts, Version: s.Version,
		Vdisks: s.Vdisks, PoolProvisioned: s.PoolProvisioned, Interfaces: s.Interfaces, Details: s.Details,
		DevicesGen: s.DevicesGen + 1<<40, Applied: s.Applied, BackupsGen: s.BackupsGen + 1<<40,
	}
}

// leafPaths are the field paths of t a change is made at: every field, through structs (a
// time is a value of its own), down to a value, pointer or slice.
func leafPaths(t reflect.Type) [][]int {
	var out [][]int
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[veil.Time]() {
			for _, sub := range leafPaths(f.Type) {
				out = append(out, append([]int{i}, sub...))
			}
			continue
		}
		out = append(out, []int{i})
	}
	return out
}

// pathName names a field path (Node.ID).
func pathName(t reflect.Type, path []int) string {
	var names []string
	for _, i := range path {
		names = append(names, t.Field(i).Name)
		t = t.Field(i).Type
	}
	return strings.Join(names, ".")
}

// mutate changes the field of v at path to another value.
func (p *patchProperty) mutate(v reflect.Value, path []int) {
	for _, i := range path {
		v = v.Field(i)
	}
	was := reflect.ValueOf(v.Interface())
	for range 100 {
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice:
			if !v.IsNil() && p.rng.IntN(2) == 0 {
				v.Set(reflect.Zero(v.Type()))
			} else {
				v.Set(p.random(v.Type()))
			}
		default:
			v.Set(p.random(v.Type()))
		}
		if !reflect.DeepEqual(was.Interface(), v.Interface()) {
			return
		}
	}
	p.t.Fatalf("no other value for a %s", v.Type())
}

// random is a random value of t that the platform's encoding carries: valid UTF-8 with the
// characters label values escape, numbers that are not 0 (a VM's cpu_count 0 reads as its
// topology's), times in UTC to the second, slices of one to three elements.
func (p *patchProperty) random(t reflect.Type) reflect.Value {
	r := p.rng
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeFor[veil.Time]():
		v.Set(reflect.ValueOf(veil.Time{Time: time.Unix(1.6e9+r.Int64N(2e8), 0).UTC()}))
		return v
	case t.Kind() == reflect.String:
		pieces := []string{"a", "b", "Z", "0", "-", " ", `"`, `\`, "\n", "é", "ж", "{", ",", "="}
		var b strings.Builder
		for range r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		v.SetString(b.String())
	case t.Kind() == reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case t.Kind() == reflect.Float64:
		switch r.IntN(8) {
		case 0:
			v.SetFloat(-1) // a disk's size unknown
		case 1, 2, 3:
			v.SetFloat(float64(1 + r.IntN(4))) // a power state, a small count
		default:
			v.SetFloat(float64(1+r.IntN(400000)) / 4)
		}
	case t.Kind() == reflect.Int:
		v.SetInt(int64(r.IntN(5)) - 1) // -1: unknown
	case t.Kind() == reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		v.Elem().Set(p.random(t.Elem()))
	case t.Kind() == reflect.Slice:
		n := 1 + r.IntN(3)
		v.Set(reflect.MakeSlice(t, n, n))
		for i := range n {
			v.Index(i).Set(p.random(t.Elem()))
		}
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			v.Field(i).Set(p.random(t.Field(i).Type))
		}
	default:
		p.t.Fatalf("no random %s: the property does not know this kind of field", t)
	}
	return v
}

// TestFamiliesSetTheirLabels: every family's series of an object of a refreshed inventory has
// as many label values as its Desc has variable labels (a series with more or fewer is refused
// on every path, and set keeps at most maxLabels).
func TestFamiliesSetTheirLabels(t *testing.T) {
	p := newPatchProperty(t, 1)
	snap, fams := p.cur, p.fams
	check := func(d *exposition.Desc, each func(s *sample)) {
		t.Helper()
		s := d.Prom.String()
		_, rest, _ := strings.Cut(s, "variableLabels: {")
		list, _, _ := strings.Cut(rest, "}")
		want := len(strings.Split(list, ","))
		if list == "" {
			want = 0
		}
		if want > maxLabels {
			t.Errorf("%s: %d labels, more than maxLabels", d.Name(), want)
		}
		var sm sample
		each(&sm)
		if !sm.ok {
			t.Errorf("%s: no object has a series in it: the check proves nothing", d.Name())
		} else if sm.n != want {
			t.Errorf("%s: %d label values, %d labels", d.Name(), sm.n, want)
		}
	}
	for k := range fams.domains {
		check(fams.domains[k].desc, func(s *sample) { firstSeries(s, fams.domains[k], snap.Domains.Slice()) })
	}
	for k := range fams.nodes {
		check(fams.nodes[k].desc, func(s *sample) { firstSeries(s, fams.nodes[k], snap.Nodes) })
	}
	for k := range fams.clusters {
		check(fams.clusters[k].desc, func(s *sample) { firstSeries(s, fams.clusters[k], pointers(snap.Clusters)) })
	}
	for k := range fams.pools {
		check(fams.pools[k].desc, func(s *sample) { firstSeries(s, fams.pools[k], pointers(snap.Datapools)) })
	}
	for k := range fams.backups {
		check(fams.backups[k].desc, func(s *sample) { firstSeries(s, fams.backups[k], pointers(snap.Backups())) })
	}
	// The rows with what the detail sweep reads (the lists here carry no snapshots, no
	// link_state).
	vdisks := pointers(append([]inventory.Vdisk(nil), snap.Vdisks...))
	for _, r := range vdisks {
		r.Snapshots = 2
	}
	for k := range fams.vdisks {
		check(fams.vdisks[k].desc, func(s *sample) { firstSeries(s, fams.vdisks[k].family, vdisks) })
	}
	ifaces := pointers(append([]inventory.Interface(nil), snap.Interfaces...))
	for _, r := range ifaces {
		r.Up = 1
	}
	for k := range fams.ifaces {
		check(fams.ifaces[k].desc, func(s *sample) { firstSeries(s, fams.ifaces[k].family, ifaces) })
	}
}

// firstSeries sets s to f's series of the first object that has one.
func firstSeries[T any](s *sample, f family[T], objs []*T) {
	for _, o := range objs {
		s.ok = false
		if f.series(o, s); s.ok {
			return
		}
	}
}

func pointers[T any](vs []T) []*T {
	out := make([]*T, len(vs))
	for i := range vs {
		out[i] = &vs[i]
	}
	return out
}
