package exposition

// Patch: a family made from the previous Set's by the series of the objects that changed, so
// that a change costs the blocks it touches, not the family. The collector removes the series
// an object had (Remove, what it emitted for the object's old version) and adds those it has
// now; the blocks holding them are read back, changed, cut again and recompressed, and every
// other block is the previous Set's.

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sort"
)

// Patch says that this build's family of d is the previous Set's with series removed (Remove)
// and added (Add). It reports false when there is no family of d to change (no previous Set,
// or it had no series of d): the family must then be emitted whole. A patched family must not
// be emitted whole in the same build.
func (b *Builder) Patch(d *Desc) bool {
	if b.prev == nil {
		return false
	}
	for _, f := range b.prev.Families {
		if f.Name == d.name {
			b.famOf(d).patch = f
			return true
		}
	}
	return false
}

// Remove removes the series of these labels from the patched family of d (none: nothing).
func (b *Builder) Remove(d *Desc, labels ...string) {
	f := b.famOf(d)
	labels, ok := boundLabels(d, labels)
	if f.patch == nil || !ok {
		return
	}
	line, ok := appendSeries(b.scratch[:0], d, 0, labels)
	b.scratch = line
	if !ok {
		return
	}
	n := len(f.rm)
	f.rm = lineKey(append(f.rm, 0, 0, 0, 0), d, line)
	binary.LittleEndian.PutUint32(f.rm[n:], uint32(len(f.rm)-n-4))
}

// patchLine is a line and its sort key.
type patchLine struct{ text, key []byte }

// patched makes the family f changes: the previous Set's, its blocks that hold a series
// removed or added read back, changed and cut again (with the next block when what is left is
// shorter than a block's minimum), the others kept.
func (b *Builder) patched(f *famBuf) *Family {
	d, old := f.d, f.patch
	whole, lines := b.ordered(f)
	if whole != nil {
		lines = b.lines
	}
	adds := make([]patchLine, 0, len(lines))
	var keys []byte
	for _, l := range lines {
		k := len(keys)
		keys = lineKey(keys, d, f.buf[l.start:l.end])
		adds = append(adds, patchLine{f.buf[l.start:l.end], keys[k:len(keys):len(keys)]})
	}
	var rms [][]byte
	for p := f.rm; len(p) > 0; {
		n := binary.LittleEndian.Uint32(p)
		rms = append(rms, p[4:4+n])
		p = p[4+n:]
	}
	slices.SortFunc(rms, bytes.Compare)
	at := func(key []byte) int {
		j := sort.Search(len(old.blocks), func(i int) bool { return bytes.Compare(old.blocks[i].first, key) > 0 })
		return max(j-1, 0)
	}
	var touched []int
	for _, a := range adds {
		touched = append(touched, at(a.key))
	}
	for _, r := range rms {
		touched = append(touched, at(r))
	}
	if len(touched) == 0 || len(old.blocks) == 0 {
		return old
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	fam := &Family{Name: old.Name, Header: old.Header, head: old.head, desc: old.desc}
	fam.blocks = make([]*block, 0, len(old.blocks)+len(touched)) // grown once: 50,000 VMs' family is a thousand blocks
	next := 0
	work := &patchWork{adds: adds, rms: rms}
	for len(touched) > 0 {
		lo, hi := touched[0], touched[0]
		for touched = touched[1:]; len(touched) > 0 && touched[0] == hi+1; touched = touched[1:] {
			hi++
		}
		fam.blocks = append(fam.blocks, old.blocks[next:lo]...)
		var blocks []*block
		blocks, hi = b.repatch(d, old, lo, hi, work)
		fam.blocks = append(fam.blocks, blocks...)
		next = hi + 1
	}
	fam.blocks = append(fam.blocks, old.blocks[next:]...)
	for _, k := range fam.blocks {
		fam.size += k.size
	}
	return fam
}

// patchWork is what a patch has still to apply, in key order: the series to add (their lines)
// and the keys of the series to remove; repatch takes off what falls in the blocks it cuts.
type patchWork struct {
	adds []patchLine
	rms  [][]byte
}

// repatch reads back old's blocks lo to hi, removes the series of rms and adds those of adds
// that fall in them (taking them off both, in order), and cuts the lines again into blocks:
// with the block after hi too when what is left is shorter than a block's minimum, so that
// deletes do not leave ever smaller blocks.
// It returns the blocks and the last old block they replace.
func (b *Builder) repatch(d *Desc, old *Family, lo, hi int, w *patchWork) ([]*block, int) {
	adds, rms := &w.adds, &w.rms
	var have []patchLine
	for j := lo; j <= hi; j++ {
		have = b.readBlock(old.blocks[j], have)
	}
	end := func(key []byte) bool { // beyond the run: in the block after hi
		return hi+1 < len(old.blocks) && bytes.Compare(key, old.blocks[hi+1].first) >= 0
	}
	// A line read back gets its key when it is compared: past the last series added or
	// removed in the run, the lines are taken as they are (most of a block's, on average).
	keys := make([]byte, 0, 2*len(have[0].text))
	merged := make([]patchLine, 0, len(have)+len(*adds))
	for i := 0; ; {
		more := len(*adds) > 0 && !end((*adds)[0].key) || len(*rms) > 0 && !end((*rms)[0])
		if !more {
			merged = append(merged, have[i:]...)
			break
		}
		if i < len(have) && have[i].key == nil {
			n := len(keys)
			keys = lineKey(keys, d, have[i].text)
			have[i].key = keys[n:len(keys):len(keys)]
		}
		add := len(*adds) > 0 && !end((*adds)[0].key) && (i == len(have) || bytes.Compare((*adds)[0].key, have[i].key) < 0)
		if !add && i == len(have) {
			break
		}
		var next patchLine
		if add {
			next, *adds = (*adds)[0], (*adds)[1:]
		} else {
			next = have[i]
			i++
		}
		for len(*rms) > 0 && !end((*rms)[0]) && bytes.Compare((*rms)[0], next.key) < 0 {
			*rms = (*rms)[1:] // a series that is not there
		}
		// A removal is of a series the family had: of the lines read back, never of one added
		// (equal keys take the line read back first).
		if !add && len(*rms) > 0 && bytes.Equal((*rms)[0], next.key) {
			*rms = (*rms)[1:]
			continue
		}
		if len(merged) > 0 && bytes.Equal(merged[len(merged)-1].key, next.key) {
			continue // added where the series is: the one there stays
		}
		merged = append(merged, next)
	}
	for len(*rms) > 0 && !end((*rms)[0]) {
		*rms = (*rms)[1:]
	}
	if len(merged) < d.shape().min && hi+1 < len(old.blocks) { // never touched: runs are maximal
		hi++
		merged = b.readBlock(old.blocks[hi], merged)
	}
	return b.cutLines(d, merged, old.blocks[lo:hi+1]), hi
}

// readBlock appends the lines of k, without their keys (repatch makes those it compares).
func (b *Builder) readBlock(k *block, dst []patchLine) []patchLine {
	var text bytes.Buffer
	text.Grow(int(k.size))
	_ = k.plain(&text) // cannot fail: the Set made the segment itself
	t := text.Bytes()
	for len(t) > 0 {
		nl := bytes.IndexByte(t, '\n') + 1
		dst = append(dst, patchLine{text: t[:nl]})
		t = t[nl:]
	}
	return dst
}

// cutLines cuts lines into blocks as family does; a block with the bytes of one of was is that
// block.
func (b *Builder) cutLines(d *Desc, lines []patchLine, was []*block) []*block {
	prev := make(map[blockKey]*block, len(was))
	for _, k := range was {
		prev[blockKey{k.hash, k.size}] = k
	}
	var out []*block
	size := 0
	for _, l := range lines {
		size += len(l.text)
	}
	b.scratch = slices.Grow(b.scratch[:0], size) // as long as the longest block: grown once
	shape, start := d.shape(), 0
	for i, l := range lines {
		if i < len(lines)-1 && !shape.cutAfter(i+1-start, l.text) {
			continue
		}
		b.scratch = b.scratch[:0]
		for _, m := range lines[start : i+1] {
			b.scratch = append(b.scratch, m.text...)
		}
		out = append(out, b.block(d, b.scratch, prev))
		start = i + 1
	}
	return out
}
