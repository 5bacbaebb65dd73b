package exposition

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// withShape sets blockLines for one test.
func withShape(t testing.TB, s blockShape) {
	old := blockLines
	blockLines = s
	t.Cleanup(func() { blockLines = old })
}

// vmFamily adds one series per id of a family labelled like the inventory's VM families.
func vmFamily(b *Builder, d *Desc, ids []string, value func(i int) float64) {
	for i, id := range ids {
		b.Add(d, value(i), id, "on")
	}
}

func vmIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-4e1c-4b6a-9d3e-%012x", i*2654435761%(1<<32), i)
	}
	return ids
}

// kept counts the blocks of f that are blocks of old (the same block, not compressed again).
func kept(f, old *Family) int {
	had := map[*block]bool{}
	for _, k := range old.blocks {
		had[k] = true
	}
	n := 0
	for _, k := range f.blocks {
		if had[k] {
			n++
		}
	}
	return n
}

// TestOneChangeRecompressesOneBlock: a value changed in a family of 10,000 series makes one new
// block; every other block is the previous Set's.
func TestOneChangeRecompressesOneBlock(t *testing.T) {
	d := NewDesc("veil_domain_memory_bytes", "Memory.", prometheus.GaugeValue, []string{"domain_id", "state"}, prometheus.Labels{"controller": "c1"})
	ids := vmIDs(10000)
	var b Builder
	vmFamily(&b, d, ids, func(int) float64 { return 1 })
	first := b.Finish()
	if n := len(first.Families[0].blocks); n < 10000/blockLines.max || n > 10000/blockLines.min {
		t.Fatalf("%d blocks for 10,000 series", n)
	}
	b.since(first)
	vmFamily(&b, d, ids, func(i int) float64 { return float64(1 + i/4321*0 + boolInt(i == 4321)) })
	second := b.Finish()
	f, old := second.Families[0], first.Families[0]
	if len(f.blocks) != len(old.blocks) || kept(f, old) != len(old.blocks)-1 {
		t.Fatalf("one value changed: %d blocks of %d kept, %d now", kept(f, old), len(old.blocks), len(f.blocks))
	}
	text, err := Families([]*Set{second})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(text, []byte(`domain_id="`+ids[4321]+`",state="on"} 2`+"\n")) {
		t.Fatal("the changed value is not in the text")
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestInsertAndDeleteKeepOtherBlocks: a series inserted or deleted changes its block and at
// most the next (the cuts are chosen by label sets, not positions); the others stay the
// previous Set's, before and after it.
func TestInsertAndDeleteKeepOtherBlocks(t *testing.T) {
	d := NewDesc("veil_domain_power_state", "Power.", prometheus.GaugeValue, []string{"domain_id", "state"}, nil)
	ids := vmIDs(10001)
	extra := ids[5000]
	ids = append(ids[:5000], ids[5001:]...)
	render := func(b *Builder, prev *Set, ids []string) *Set {
		b.since(prev)
		vmFamily(b, d, ids, func(int) float64 { return 1 })
		return b.Finish()
	}
	var b Builder
	first := render(&b, nil, ids)
	withExtra := append(append(append([]string(nil), ids[:5000]...), extra), ids[5000:]...)
	inserted := render(&b, first, withExtra)
	gone := withExtra[7000]
	deleted := render(&b, inserted, append(append([]string(nil), withExtra[:7000]...), withExtra[7001:]...))
	for _, c := range []struct {
		name     string
		old, new *Set
	}{{"insert", first, inserted}, {"delete", inserted, deleted}} {
		f, old := c.new.Families[0], c.old.Families[0]
		if k := kept(f, old); k < len(old.blocks)-2 || k < len(f.blocks)-2 {
			t.Errorf("%s: %d blocks of %d kept, %d now", c.name, k, len(old.blocks), len(f.blocks))
		}
	}
	text, err := Families([]*Set{deleted})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(text, []byte(extra)) || bytes.Contains(text, []byte(gone)) || bytes.Count(text, []byte("\n")) != 10000+2 {
		t.Fatal("the text lacks the inserted series or holds the deleted one")
	}
}

// mutate makes random changes to the rows of r: values changed, series inserted (new label
// sets) and deleted.
func mutate(rng *rand.Rand, r *renderable) {
	for range 1 + rng.IntN(6) {
		if len(r.rows) == 0 {
			return
		}
		i := rng.IntN(len(r.rows))
		switch rng.IntN(3) {
		case 0:
			r.rows[i].v = randomValue(rng)
		case 1:
			x := r.rows[i]
			x.labels = append([]string(nil), x.labels...)
			for k := range x.labels {
				x.labels[k] = randomLabel(rng) + "+" + fmt.Sprint(rng.Uint32())
			}
			if len(x.labels) > 0 {
				r.rows = append(r.rows, x)
			}
		case 2:
			r.rows = append(r.rows[:i], r.rows[i+1:]...)
		}
	}
}

// TestBlocksAreWhatClientGolangWrites: renders after random value changes, inserts and deletes,
// each from the previous Set, scrape byte for byte as client_golang writes the same series, in
// text and OpenMetrics and every encoding, and decode to the same protobuf families; blocks
// small enough that every family has many.
func TestBlocksAreWhatClientGolangWrites(t *testing.T) {
	withShape(t, blockShape{min: 3, every: 4, max: 16})
	for seed := range uint64(3) { // each seed is some 8 s under the race detector
		rng := rand.New(rand.NewPCG(seed, 37))
		c := controllers(rng, "alpha")[0]
		live, full := registries()
		full.MustRegister(c)
		rd := NewRenderer()
		var b Builder
		var set *Set
		sets := func() []*Set { return []*Set{set} }
		ref := promhttp.HandlerFor(full, promhttp.HandlerOpts{EnableOpenMetrics: true})
		h := Handler(HandlerOpts{Live: live, Sets: sets, Fallback: ref, Renderer: rd})
		for round := range 25 {
			set = c.render(&b, set)
			if round%3 == 1 {
				set.prepare(rd.demand.wanted(rd.clock()), &b)
			}
			for _, sc := range []struct{ accept, enc string }{
				{"", []string{"gzip", "zstd", "identity"}[round%3]},
				{acceptProm3, []string{"zstd", "identity", "gzip"}[round%3]},
				{acceptNative, []string{"identity", "gzip", "zstd"}[round%3]},
			} {
				_, want := get(t, ref, sc.accept, "identity")
				_, body := get(t, h, sc.accept, sc.enc)
				got := decode(t, sc.enc, body)
				if sc.accept == acceptNative {
					sameFamilies(t, got, want)
				} else if !bytes.Equal(got, want) {
					t.Fatalf("seed %d, round %d, %q %s: %s", seed, round, sc.accept, sc.enc, firstDiff(got, want))
				}
			}
			mutate(rng, c)
		}
	}
}

// BenchmarkBlockShape compresses inventory-like families of 10,000 VMs cut in blocks of each
// shape, and changes one series at a time: compressed bytes per series against the whole
// family as one segment, and the CPU of one change (the family emitted again, one block
// compressed).
func BenchmarkBlockShape(b *testing.B) {
	info := NewDesc("veil_domain_info", "Info.", prometheus.GaugeValue, []string{"domain_id", "domain", "node_id", "template", "thin", "parent_id", "tags"}, prometheus.Labels{"controller": "c1"})
	power := NewDesc("veil_domain_power_state", "Power.", prometheus.GaugeValue, []string{"domain_id", "state"}, prometheus.Labels{"controller": "c1"})
	ids := vmIDs(10000)
	states := []string{"on", "off", "suspended"}
	names, nodes, tags := make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i := range ids {
		names[i], nodes[i], tags[i] = fmt.Sprintf("desktop-%05d", i), fmt.Sprintf("node-%03d", i%500), fmt.Sprintf("vdi,floor-%d", i%7)
	}
	emit := func(bl *Builder, changed int) {
		for i, id := range ids {
			bl.Add(info, 1, id, names[i], nodes[i], "false", "true", "", tags[i])
		}
		bl.Flush()
		for i, id := range ids {
			bl.Add(power, 1, id, states[(i+changed+boolInt(i == changed))%3])
		}
	}
	for _, s := range []blockShape{{1 << 30, 1, 1 << 30}, {16, 32, 128}, {32, 64, 256}, {64, 128, 512}, {128, 256, 1024}, {256, 512, 2048}} {
		name := fmt.Sprintf("min=%d,every=%d", s.min, s.every)
		if s.min == 1<<30 {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			withShape(b, s)
			var bl Builder
			emit(&bl, 0)
			set := bl.Finish()
			b.ResetTimer()
			for i := range b.N {
				bl.since(set)
				emit(&bl, 1+i%len(ids))
				set = bl.Finish()
			}
			b.StopTimer()
			blocks := 0
			for _, f := range set.Families {
				blocks += len(f.blocks)
			}
			b.ReportMetric(float64(set.compressed)/float64(2*len(ids)), "deflate-B/series")
			b.ReportMetric(float64(set.size)/float64(set.compressed), "ratio")
			b.ReportMetric(float64(blocks), "blocks")
		})
	}
}

// patch renders rows from prev by Patch: for each family the series of old not in rows (by
// label set) or with another value removed, those of rows not in old or changed added.
func patch(b *Builder, prev *Set, old, rows []row) *Set {
	key := func(x row) string { return x.d.name + "\x00" + strings.Join(x.labels, "\x00") }
	was, now := map[string]row{}, map[string]row{}
	for _, x := range old {
		was[key(x)] = x
	}
	for _, x := range rows {
		now[key(x)] = x
	}
	b.since(prev)
	patched := map[*Desc]bool{}
	for _, x := range append(append([]row(nil), old...), rows...) {
		if !patched[x.d] {
			patched[x.d] = true
			b.Sink().Patch(x.d)
		}
	}
	for k, x := range was {
		if y, ok := now[k]; !ok || math.Float64bits(y.v) != math.Float64bits(x.v) {
			b.Sink().Removing().Add(x.d, x.v, x.labels...)
		}
	}
	for k, x := range now {
		if y, ok := was[k]; !ok || math.Float64bits(y.v) != math.Float64bits(x.v) {
			b.Add(x.d, x.v, x.labels...)
		}
	}
	return b.Finish()
}

// TestPatchIsWhatClientGolangWrites: renders that patch the previous Set with the series that
// changed (random value changes, inserts and deletes, in any order of the calls), one after the
// other, scrape byte for byte as client_golang writes the same series; blocks small enough
// that every family has many.
func TestPatchIsWhatClientGolangWrites(t *testing.T) {
	withShape(t, blockShape{min: 3, every: 4, max: 16})
	for seed := range uint64(4) { // each seed is some 10 s under the race detector
		rng := rand.New(rand.NewPCG(seed, 41))
		c := controllers(rng, "alpha")[0]
		live, full := registries()
		full.MustRegister(c)
		var b Builder
		set := c.render(&b, nil)
		ref := promhttp.HandlerFor(full, promhttp.HandlerOpts{EnableOpenMetrics: true})
		h := Handler(HandlerOpts{Live: live, Sets: func() []*Set { return []*Set{set} }, Fallback: ref})
		for round := range 30 {
			old := append([]row(nil), c.rows...)
			mutate(rng, c)
			set = patch(&b, set, old, c.rows)
			for _, sc := range []struct{ accept, enc string }{{"", "gzip"}, {acceptProm3, "identity"}, {acceptNative, "zstd"}} {
				_, want := get(t, ref, sc.accept, "identity")
				got := decode(t, sc.enc, func() []byte { _, body := get(t, h, sc.accept, sc.enc); return body }())
				if sc.accept == acceptNative {
					sameFamilies(t, got, want)
				} else if !bytes.Equal(got, want) {
					t.Fatalf("seed %d, round %d, %q: %s", seed, round, sc.accept, firstDiff(got, want))
				}
			}
		}
	}
}

// TestPatchChangesTheBlocksItTouches: a value changed, a series inserted and one deleted in a
// family of 10,000 by Patch leave every block but those that held them the previous Set's, in
// blocks of the default shape and small ones (SmallBlocks).
func TestPatchChangesTheBlocksItTouches(t *testing.T) {
	for _, small := range []bool{false, true} {
		d := NewDesc("veil_domain_power_state", "Power.", prometheus.GaugeValue, []string{"domain_id", "state"}, nil)
		if small {
			d.SmallBlocks()
		}
		ids := vmIDs(10000)
		var b Builder
		vmFamily(&b, d, ids, func(int) float64 { return 1 })
		first := b.Finish()
		if n, s := len(first.Families[0].blocks), d.shape(); n < 10000/s.max || n > 10000/s.min {
			t.Errorf("small %v: %d blocks of 10,000 lines, shape %+v", small, n, s)
		}
		b.since(first)
		s := b.Sink()
		if !s.Patch(d) {
			t.Fatal("no family to patch")
		}
		s.Removing().Add(d, 1, ids[10], "on")
		s.Add(d, 1, ids[10], "off")
		s.Add(d, 1, "0000-new-vm", "on")
		s.Removing().Add(d, 1, ids[9000], "on")
		second := b.Finish()
		f, old := second.Families[0], first.Families[0]
		if k := kept(f, old); k < len(old.blocks)-6 || k == len(old.blocks) {
			t.Errorf("small %v: %d blocks of %d kept, %d now", small, k, len(old.blocks), len(f.blocks))
		}
		text, err := Families([]*Set{second})
		if err != nil {
			t.Fatal(err)
		}
		var want Builder
		vmFamily(&want, d, append(append([]string{"0000-new-vm"}, ids[:9000]...), ids[9001:]...), func(int) float64 { return 1 })
		want.Add(d, 1, ids[10], "off")
		wantText, _ := Families([]*Set{want.Finish()})
		wantText = bytes.Replace(wantText, []byte(`veil_domain_power_state{domain_id="`+ids[10]+`",state="on"} 1`+"\n"), nil, 1)
		if !bytes.Equal(text, wantText) {
			t.Errorf("small %v: patched text differs: %s", small, firstDiff(text, wantText))
		}
	}
}
