package exposition

// Builder: series lines are appended per family as a collector emits them, then each family
// is sorted as client_golang sorts it, checksummed and compressed once (or kept from the
// previous Set when its bytes did not change).

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Builder collects the series of one Set. It is not safe for concurrent use; keep one per
// collector and reuse it. A flushed family's text buffer goes back to the Builder for the next
// family of the same build: a collector that flushes one family after the other holds about
// one family's text, not the whole inventory's. Finish gives the buffers to textPool: between
// builds a Builder holds nothing (sixty controllers would otherwise each keep their largest
// families), and the next build of any Builder starts from them.
type Builder struct {
	fams  map[*Desc]*famBuf
	adds  int
	done  []*Family // flushed, for Finish
	lines []line
	// scratch holds a block's lines while they are hashed and compressed, when sorting moved
	// them apart.
	scratch []byte
	keyed   []keyedLine // lines with their sort keys in keys, while a family is sorted
	keys    []byte
	// free are text and offset buffers of flushed families, for the next.
	free     [][]byte
	freeOffs [][]uint32
	waited   time.Duration // paused for scrapes, in all (yield)
	worked   int64         // bytes compressed or converted since the last yield (yieldAfter)
	gate     *gate         // of the Renderer whose scrapes renders yield to; nil: none
	// prev is the Set this build replaces: a family whose bytes did not change keeps its
	// compressed form, and Keep takes a family from it. The Cache sets it before each emit.
	prev *Set
	// source is what the collector says this build shows (Sink.Rendering), for its Set.
	source any
}

// since makes prev the Set this build replaces (nil: compress every family afresh).
func (b *Builder) since(prev *Set) { b.prev = prev }

// yieldEvery is how many series a render adds between yields (yield.go): rendering is
// background work, a scrape is someone waiting.
const yieldEvery = 2048

// unchangedSeed seeds the hashes that tell a family's bytes unchanged since the last build.
var unchangedSeed = maphash.MakeSeed()

// textPool holds the text buffers of finished builds for the next build of any Builder: a
// render reuses the last one's memory instead of making the collector run for it, and
// buffers nobody asks for go with the next collections (sync.Pool).
var textPool sync.Pool

// maxPooled is the largest text buffer textPool keeps: what it holds counts as live for the
// collector's pacing, so the families of 50,000 VMs (megabytes each) would raise the peak by
// as much as they save in garbage.
const maxPooled = 2 << 20

type famText struct {
	buf  []byte
	offs []uint32
}

type famBuf struct {
	d    *Desc
	buf  []byte
	offs []uint32 // start of each line in buf
	// patch is the previous Set's family this build changes (Patch), nil when it is emitted
	// whole; rm are the sort keys of the series it removes, each behind its length.
	patch *Family
	rm    []byte
}

type line struct{ start, end uint32 }

// MaxLabelValueBytes bounds a label value: the controller and the guests choose most of them
// (names, a guest's kernel release), and one value of megabytes would be carried by every scrape
// and every Prometheus. A longer value is cut to end in "…" within the bound, and counted in
// LabelValuesCut.
const MaxLabelValueBytes = 1024

// labelValuesCut counts the label values cut to MaxLabelValueBytes since start.
var labelValuesCut atomic.Uint64

// LabelValuesCut is how many label values were cut to MaxLabelValueBytes since start (a value
// cut at every render counts at every render).
func LabelValuesCut() uint64 { return labelValuesCut.Load() }

// BoundLabel cuts s to MaxLabelValueBytes, at a character boundary, ending in "…".
func BoundLabel(s string) string {
	if len(s) <= MaxLabelValueBytes {
		return s
	}
	labelValuesCut.Add(1)
	cut := MaxLabelValueBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Add appends one series. A series whose label count does not match or whose label value is
// not valid UTF-8 is dropped, as prometheus.NewConstMetric refuses it; a label value longer than
// MaxLabelValueBytes is cut (BoundLabel).
func (b *Builder) Add(d *Desc, v float64, labels ...string) {
	labels, ok := boundLabels(d, labels)
	if !ok {
		return
	}
	if b.adds++; b.adds%yieldEvery == 0 {
		b.yield()
	}
	f := b.famOf(d)
	if f.buf == nil {
		if len(b.free) > 0 {
			f.buf, b.free = b.free[len(b.free)-1], b.free[:len(b.free)-1]
			f.offs, b.freeOffs = b.freeOffs[len(b.freeOffs)-1], b.freeOffs[:len(b.freeOffs)-1]
		} else if t, ok := textPool.Get().(*famText); ok {
			f.buf, f.offs = t.buf, t.offs
		}
	}
	if buf, ok := appendSeries(f.buf, d, v, labels); ok {
		f.offs = append(f.offs, uint32(len(f.buf)))
		f.buf = buf
	}
}

// boundLabels checks the label count and cuts values longer than MaxLabelValueBytes (in a copy
// of labels: the caller's slice is the caller's); false: the series is refused.
func boundLabels(d *Desc, labels []string) ([]string, bool) {
	if len(labels) != d.nvar {
		return nil, false
	}
	cloned := false
	for i, l := range labels {
		// Values are checked for UTF-8 as they are written (appendEscaped), in one pass with
		// the escaping; one to be cut is checked whole first, as before cutting.
		if len(l) <= MaxLabelValueBytes {
			continue
		}
		if !utf8.ValidString(l) {
			return nil, false
		}
		if !cloned {
			labels, cloned = slices.Clone(labels), true
		}
		labels[i] = BoundLabel(l)
	}
	return labels, true
}

// famOf is the family buffer of d in this build.
func (b *Builder) famOf(d *Desc) *famBuf {
	if b.fams == nil {
		b.fams = make(map[*Desc]*famBuf)
	}
	f := b.fams[d]
	if f == nil {
		f = &famBuf{d: d}
		b.fams[d] = f
	}
	return f
}

// appendSeries appends the series line to buf; false (buf as it was) when a label value is not
// valid UTF-8.
func appendSeries(buf []byte, d *Desc, v float64, labels []string) ([]byte, bool) {
	start := len(buf)
	buf = append(buf, d.name...)
	for _, s := range d.slots {
		buf = append(buf, s.prefix...)
		if s.varIdx < 0 {
			buf = append(buf, s.constVal...)
		} else {
			var ok bool
			if buf, ok = appendEscaped(buf, labels[s.varIdx]); !ok {
				return buf[:start], false
			}
		}
		buf = append(buf, '"')
	}
	if len(d.slots) > 0 {
		buf = append(buf, '}')
	}
	buf = append(buf, ' ')
	buf = appendFloat(buf, v)
	return append(buf, '\n'), true
}

// Flush compresses the families added so far and releases their text: a collector that
// emits one family after the other keeps the text of one at a time. A family flushed must not
// be added to again before Finish.
func (b *Builder) Flush() {
	prev := b.prev
	var old map[string]*Family
	if prev != nil {
		old = make(map[string]*Family, len(prev.Families))
		for _, f := range prev.Families {
			old[f.Name] = f
		}
	}
	for d, f := range b.fams {
		if len(f.offs) == 0 && f.patch == nil {
			continue
		}
		var fam *Family
		if f.patch != nil {
			fam = b.patched(f)
			f.patch, f.rm = nil, f.rm[:0]
		} else {
			fam = b.family(d, f, old[d.name])
		}
		if len(fam.blocks) > 0 {
			b.done = append(b.done, fam)
		}
		b.free, b.freeOffs = append(b.free, f.buf[:0]), append(b.freeOffs, f.offs[:0])
		f.buf, f.offs = nil, nil
	}
}

// Keep adds the previous Set's family of d as it is, for a collector that knows the family's
// series have not changed since that Set was built (nothing to format, hash or compress); a
// family the previous Set lacks had no series then and has none now. It reports false without
// a previous Set: the family must then be emitted. A kept family must not be added to in this
// build.
func (b *Builder) Keep(d *Desc) bool {
	if b.prev == nil {
		return false
	}
	for _, f := range b.prev.Families {
		if f.Name == d.name {
			b.done = append(b.done, f)
			break
		}
	}
	return true
}

// Finish returns the Set of what was added since the last Finish. A family whose bytes equal
// those of the same family in the previous Set keeps its compressed form.
func (b *Builder) Finish() *Set {
	b.Flush()
	b.prev = nil
	set := &Set{Families: b.done, source: b.source}
	b.source = nil
	for i := range b.free {
		if cap(b.free[i]) <= maxPooled {
			textPool.Put(&famText{b.free[i], b.freeOffs[i]})
		}
	}
	b.done, b.free, b.freeOffs, b.lines, b.scratch = nil, nil, nil, nil, nil
	sort.Slice(set.Families, func(i, j int) bool { return set.Families[i].Name < set.Families[j].Name })
	for _, f := range set.Families {
		set.size += f.size
		for _, k := range f.blocks {
			set.compressed += int64(len(k.deflate))
		}
	}
	return set
}

// ordered returns the family's lines in client_golang's order (by label values, in the order
// of the label names), without a repeated label set (the first added stays): f.buf itself when
// it already is in that order (no copy), otherwise the lines to write one after the other.
func (b *Builder) ordered(f *famBuf) (whole []byte, lines []line) {
	b.lines = b.lines[:0]
	for i, o := range f.offs {
		end := uint32(len(f.buf))
		if i+1 < len(f.offs) {
			end = f.offs[i+1]
		}
		b.lines = append(b.lines, line{o, end})
	}
	start := f.d.valueStart
	cmp := func(x, y line) int {
		if len(f.d.slots) == 0 {
			return 0
		}
		return compareValues(f.buf[x.start:x.end], f.buf[y.start:y.end], start)
	}
	strictly := true
	for i := 1; i < len(b.lines) && strictly; i++ {
		strictly = cmp(b.lines[i-1], b.lines[i]) < 0
	}
	if strictly {
		return f.buf, nil
	}
	// Each line's values, decoded once into a key that compares as compareValues does: a sort
	// then compares bytes, not escapes (decoding at every comparison was most of a render's CPU).
	b.keys, b.keyed = b.keys[:0], b.keyed[:0]
	for _, l := range b.lines {
		k := uint32(len(b.keys))
		if len(f.d.slots) > 0 {
			b.keys = appendKey(b.keys, f.buf[l.start:l.end], start)
		}
		b.keyed = append(b.keyed, keyedLine{l, k, uint32(len(b.keys))})
	}
	key := func(x keyedLine) []byte { return b.keys[x.kstart:x.kend] }
	// Equal label sets keep the order they were added in (the first stays, below): a sort by
	// the lines' offsets among equals is a stable sort without its merging's cost.
	slices.SortFunc(b.keyed, func(x, y keyedLine) int {
		if c := bytes.Compare(key(x), key(y)); c != 0 {
			return c
		}
		return int(x.start) - int(y.start)
	})
	lines = b.lines[:0]
	for i, l := range b.keyed {
		if i > 0 && bytes.Equal(key(b.keyed[i-1]), key(l)) {
			continue
		}
		lines = append(lines, l.line)
	}
	return nil, lines
}

// keyedLine is a line with its sort key's place in Builder.keys.
type keyedLine struct {
	line
	kstart, kend uint32
}

// appendKey appends the sort key of a line (its label values from start, decoded): each value's
// bytes, a 0 byte written 0x00 0xff, and 0x00 0x00 after each value, so that keys compare as
// compareValues compares the lines (a value that ends sorts before any that goes on).
func appendKey(dst, l []byte, start int) []byte {
	i := start
	for {
		c, next, end := nextByte(l, i)
		i = next
		switch {
		case end:
			dst = append(dst, 0, 0)
			if l[i] == '}' {
				return dst
			}
			// `,name="` of the next label.
			i += bytes.IndexByte(l[i:], '"') + 1
		case c == 0:
			dst = append(dst, 0, 0xff)
		default:
			dst = append(dst, c)
		}
	}
}

// compareValues compares two lines of one family by their label values, decoded, in the
// order they are written; start is the offset of the first value.
func compareValues(a, b []byte, start int) int {
	i, j := start, start
	for {
		ca, ni, ea := nextByte(a, i)
		cb, nj, eb := nextByte(b, j)
		switch {
		case ea && eb:
			i, j = ni, nj
			if a[i] == '}' {
				return 0
			}
			// The same label names follow in both: skip `,name="`.
			k := bytes.IndexByte(a[i:], '"') + 1
			i, j = i+k, j+k
			continue
		case ea:
			return -1
		case eb:
			return 1
		case ca != cb:
			if ca < cb {
				return -1
			}
			return 1
		}
		i, j = ni, nj
	}
}

// nextByte decodes the byte of an escaped label value at l[i]; end is true at its closing quote.
func nextByte(l []byte, i int) (c byte, next int, end bool) {
	switch l[i] {
	case '"':
		return 0, i + 1, true
	case '\\':
		if l[i+1] == 'n' {
			return '\n', i + 2, false
		}
		return l[i+1], i + 2, false
	}
	return l[i], i + 1, false
}

// appendEscaped appends the label value s escaped as the text format escapes it, copying the
// runs between escapes whole, and says whether s is valid UTF-8 (checked from its first byte
// that is not ASCII, once): a render escapes every value of every series, so one pass instead of
// a check and then an escape.
func appendEscaped(buf []byte, s string) ([]byte, bool) {
	start, checked := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			if !checked && !utf8.ValidString(s[i:]) {
				return buf, false
			}
			checked = true
			continue
		}
		var esc byte
		switch c {
		case '\\':
			esc = '\\'
		case '"':
			esc = '"'
		case '\n':
			esc = 'n'
		default:
			continue
		}
		buf = append(buf, s[start:i]...)
		buf = append(buf, '\\', esc)
		start = i + 1
	}
	return append(buf, s[start:]...), true
}

// appendFloat writes v as client_golang's text encoder does.
func appendFloat(buf []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(buf, '1')
	case v == 0:
		return append(buf, '0')
	case v == -1:
		return append(buf, "-1"...)
	case math.IsNaN(v):
		return append(buf, "NaN"...)
	case math.IsInf(v, +1):
		return append(buf, "+Inf"...)
	case math.IsInf(v, -1):
		return append(buf, "-Inf"...)
	}
	return strconv.AppendFloat(buf, v, 'g', -1, 64)
}
