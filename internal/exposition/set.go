package exposition

// A Set's families hold their series lines as blocks, each a raw deflate segment ending in a
// sync flush, so that a gzip response is their concatenation behind one header, and a zstd
// response the concatenation of frames made from them on first use (the body's zstdFrame).

import (
	"bytes"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// Set is what one collector rendered: its families sorted by name. It never changes; a
// collector replaces it.
type Set struct {
	Families []*Family

	size, compressed int64
	source           any // what the collector rendered it from (Sink.Rendering), nil if unsaid
}

// Source is what the collector said the Set was rendered from (Sink.Rendering): nil if it
// said nothing. A collector's state at that render, so that the next render keeps or patches
// what did not change since, and readers know what the Set shows.
func (s *Set) Source() any { return s.source }

// Family is the rendered series of one family of one Set, without its HELP and TYPE lines:
// its lines in client_golang's order, cut into blocks (blocks.go).
type Family struct {
	Name   string
	Header string // "# HELP ...\n# TYPE ...\n"

	blocks []*block
	size   int64  // of the lines, all blocks
	head   *piece // Header
	desc   *Desc
}

// block is a run of consecutive lines of a family, compressed on its own: a change
// recompresses the blocks it touched and the next Set keeps the others as they are, with the
// other formats made from them.
type block struct {
	body                                // the lines
	hash   uint64                       // of the lines, to tell them unchanged (Builder)
	first  []byte                       // the sort key of its first line (appendKey), to find a series' block (Patch)
	others [nForms]atomic.Pointer[body] // the lines in the other formats (formats.go); [formText] unused
	// othersMu is held while one of others is made.
	othersMu sync.Mutex
}

// plain writes the family's lines to w.
func (f *Family) plain(w io.Writer) error {
	for _, k := range f.blocks {
		if err := k.plain(w); err != nil {
			return err
		}
	}
	return nil
}

// piece is text compressed once for gzip responses.
type piece struct {
	deflate []byte // raw deflate, ending in a sync flush
	crc     uint32 // of the plain text
	size    int64  // of the plain text
	// shift is x^(8·size) mod p(x): what crc32Combine computes from size, made once here
	// because a scrape combines every block's CRC.
	shift uint32
}

// pieceOf compresses text.
func pieceOf(text string) piece {
	return piece{
		deflate: segment(func(w io.Writer) { _, _ = io.WriteString(w, text) }),
		crc:     crc32.ChecksumIEEE([]byte(text)),
		size:    int64(len(text)),
		shift:   x8nModP(int64(len(text))),
	}
}

// finalBlock ends a raw deflate stream: an empty final block with fixed codes.
var finalBlock = []byte{0x03, 0x00}

// level is the deflate level of rendered families: compressed once per change, so a little
// more effort than a scrape could afford.
const level = 5

// segmentWriters are the deflate writers of renders, shared by every Builder: a writer holds
// 0.75 MB of state and takes 0.5 ms to make, which sixty controllers' Builders would each keep
// otherwise. A free list, not a sync.Pool: every collection empties a pool, and at GOGC 25 a
// pushed change's patch found it empty so often that making writers again was a third of its
// CPU (BenchmarkPatchOne: 0.32 -> 0.21 ms and 59 -> 38 KB a patch). It holds as many as
// renders ran at once, up to its size.
var segmentWriters = make(chan *flate.Writer, 4)

// segmentOuts are the output buffers of segment, up to maxPooled: growing a new one for each
// family was most of what a render allocated (a 1 MB segment grows through 2 MB of buffers).
var segmentOuts sync.Pool

// segment compresses what write writes into a raw deflate segment ending in a sync flush.
func segment(write func(io.Writer)) []byte {
	out, ok := segmentOuts.Get().(*bytes.Buffer)
	if !ok {
		out = new(bytes.Buffer)
	}
	out.Reset()
	var w *flate.Writer
	select {
	case w = <-segmentWriters:
		w.Reset(out)
	default:
		w, _ = flate.NewWriter(out, level)
	}
	write(w)
	_ = w.Flush()
	w.Reset(nil)
	select {
	case segmentWriters <- w:
	default: // as many as the list holds are free already
	}
	seg := bytes.Clone(out.Bytes()) // exactly its size: the Set keeps it
	if out.Cap() <= maxPooled {
		segmentOuts.Put(out) // a larger one would count as live for the GC, as textPool's
	}
	return seg
}

// inflaters are the deflate readers of plain: an identity scrape reads every block, and a
// reader holds a 32 KiB window.
var inflaters sync.Pool

// plain writes the piece's text to w.
func (p *piece) plain(w io.Writer) error {
	src := io.MultiReader(bytes.NewReader(p.deflate), bytes.NewReader(finalBlock))
	r, ok := inflaters.Get().(io.ReadCloser)
	if ok {
		_ = r.(flate.Resetter).Reset(src, nil)
	} else {
		r = flate.NewReader(src)
	}
	_, err := io.Copy(w, r)
	if err == nil {
		inflaters.Put(r)
	}
	return err
}

var zstdEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
