package exposition

// Blocks: a family's sorted lines are cut into blocks of a few hundred series, each compressed
// on its own, so that a change of one series recompresses one block. The cuts are chosen by the
// lines' label sets (content-defined), not by their positions: a series inserted or deleted
// moves the cuts of its own block and perhaps the next, and every later block keeps its bytes,
// found again in the previous Set by their hash, length and CRC.

import (
	"bytes"
	"hash/crc32"
	"hash/maphash"
	"io"
)

// blockShape bounds a block, in lines: a cut follows a line whose label set hashes to 0 modulo
// every once the block has min lines, and always at max. A block then holds about min + every
// lines.
type blockShape struct{ min, every, max int }

// blockLines is the shape of every block: about 200 lines. Smaller blocks compress worse (each
// starts without a dictionary and carries its own code tables), larger ones cost more per
// change. Measured: two VM families of 10,000 series (BenchmarkBlockShape) take 14.1 deflate
// bytes per series at this shape, 14.9 at 32/64, 13.7 at 128/256 and 13.3 as whole families;
// the guest series of 2,000 VMs (BenchmarkGuestRender), which compress 18 to 1, 0.406 MiB
// against 0.447 at 32/64, 0.391 at 128/256 and 0.375 whole. At 32/64 a pushed change cost
// about 0.3 ms less (half the blocks' compression).
var blockLines = blockShape{min: 64, every: 128, max: 512}

// smallBlockLines is the shape of a family patched a few series at a time (Desc.SmallBlocks),
// about 50 lines: a pushed change reads back and recompresses each block it touches, and at 200
// lines the four VM families and the node family a power change touches were most of its CPU.
// Measured (BenchmarkBlockShape, BenchmarkPatchOne): 16.5 deflate bytes per series against
// 14.0, some 0.1 ms of CPU per block patched against 0.24, a whole family of 10,000 series
// compressed in 16 ms against 13.
var smallBlockLines = blockShape{min: 16, every: 32, max: 128}

// SmallBlocks holds the family in blocks of smallBlockLines, for a family a collector patches
// object by object (Sink.Patch); it returns d.
func (d *Desc) SmallBlocks() *Desc {
	d.small = true
	return d
}

// shape is the block shape of d's family.
func (d *Desc) shape() blockShape {
	if d.small {
		return smallBlockLines
	}
	return blockLines
}

// cutAfter says whether a block of n lines ends with line (not the family's last).
func (s blockShape) cutAfter(n int, line []byte) bool {
	switch {
	case n >= s.max:
		return true
	case n < s.min:
		return false
	}
	return maphash.Bytes(cutSeed, line[:bytes.LastIndexByte(line, ' ')])%uint64(s.every) == 0
}

// lineKey appends the sort key of a series line of d (appendKey; none without labels).
func lineKey(dst []byte, d *Desc, line []byte) []byte {
	if len(d.slots) == 0 {
		return dst
	}
	return appendKey(dst, line, d.valueStart)
}

// cutSeed seeds the hash of a line's label set that chooses the cuts.
var cutSeed = maphash.MakeSeed()

// blockKey finds a block of the previous Set again.
type blockKey struct {
	hash uint64
	size int64
}

// family makes the Family of f's lines, in client_golang's order, cut into blocks; a block whose
// bytes a block of old (the family in the previous Set, or nil) has is that block. When every
// block is old's, in old's order, the Family is old.
func (b *Builder) family(d *Desc, f *famBuf, old *Family) *Family {
	whole, lines := b.ordered(f)
	if whole != nil {
		lines = b.lines // all of them, in order one after the other in f.buf
	}
	var prev map[blockKey]*block
	if old != nil {
		prev = make(map[blockKey]*block, len(old.blocks))
		for _, k := range old.blocks {
			prev[blockKey{k.hash, k.size}] = k
		}
	}
	fam := &Family{Name: d.name, Header: d.header, head: d.compressedHeader(), desc: d}
	same := old != nil && old.Header == fam.Header
	shape, start := d.shape(), 0
	for i, l := range lines {
		if i%yieldEvery == yieldEvery-1 {
			b.yield()
		}
		if i < len(lines)-1 && !shape.cutAfter(i+1-start, f.buf[l.start:l.end]) {
			continue
		}
		var text []byte
		if whole != nil {
			text = whole[lines[start].start:l.end]
		} else {
			b.scratch = b.scratch[:0]
			for _, m := range lines[start : i+1] {
				b.scratch = append(b.scratch, f.buf[m.start:m.end]...)
			}
			text = b.scratch
		}
		k := b.block(d, text, prev)
		same = same && len(fam.blocks) < len(old.blocks) && old.blocks[len(fam.blocks)] == k
		fam.blocks = append(fam.blocks, k)
		fam.size += k.size
		start = i + 1
	}
	if same && len(fam.blocks) == len(old.blocks) {
		return old
	}
	return fam
}

// block returns the block of text: prev's with the same bytes (the same length and both
// checksums: a CRC-32 alone would, once in 2³² changes of the same length, serve a changed
// block's old bytes), or a new one, compressed now.
func (b *Builder) block(d *Desc, text []byte, prev map[blockKey]*block) *block {
	h := maphash.Bytes(unchangedSeed, text)
	crc := crc32.ChecksumIEEE(text)
	if k := prev[blockKey{h, int64(len(text))}]; k != nil && k.crc == crc {
		return k
	}
	b.yieldAfter(int64(len(text)))
	k := &block{hash: h, first: lineKey(nil, d, text[:bytes.IndexByte(text, '\n')+1])}
	k.piece = piece{
		deflate: segment(func(w io.Writer) { _, _ = w.Write(text) }),
		crc:     crc,
		size:    int64(len(text)),
		shift:   x8nModP(int64(len(text))),
	}
	return k
}
