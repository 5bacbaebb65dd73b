package exposition

// The formats other than text: a rendered block's lines are also kept as OpenMetrics 1.0
// lines and as protobuf Metric messages (part of the body of a length-delimited
// MetricFamily), each made from the text lines the first time a scrape asks for that format,
// compressed once, and kept while the block is unchanged. A Cache makes them at each render for
// the formats scrapers asked for lately; they and the zstd frames are dropped when nobody has
// asked for them for keepForm, so that a site scraping one format holds that one.

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"
)

// form is a format a rendered family is served in.
type form int

const (
	formText form = iota // the rendered lines themselves (the block's body)
	formOpenMetrics
	formProto
	nForms
)

// formZstd is the demand for zstd responses, whose frames are made from a body at its first
// zstd scrape and kept with it.
const formZstd = nForms

// keepForm is how long what a format needs is kept after the last scrape that asked for it:
// longer than any scrape interval, short enough that an exporter nobody scrapes in protobuf
// any more stops holding it.
const keepForm = 10 * time.Minute

// demand records when each format (and zstd) was last asked for, and which askings' forms
// were dropped since.
type demand struct {
	mu      sync.Mutex
	last    [nForms + 1]time.Time
	dropped [nForms + 1]time.Time // the last asking whose forms were dropped
}

func (d *demand) asked(f form, now time.Time) {
	d.mu.Lock()
	d.last[f] = now
	d.mu.Unlock()
}

// wanted says which formats were asked for within keepForm.
func (d *demand) wanted(now time.Time) (w [nForms + 1]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for f, t := range d.last {
		w[f] = !t.IsZero() && now.Sub(t) < keepForm
	}
	return w
}

// expired says which formats were asked for once but not within keepForm, and whose forms
// were not dropped since: those to drop now, once.
func (d *demand) expired(now time.Time) (drop [nForms + 1]bool, any bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for f, t := range d.last {
		if !t.IsZero() && now.Sub(t) >= keepForm && !d.dropped[f].Equal(t) {
			drop[f], any = true, true
			d.dropped[f] = t
		}
	}
	return drop, any
}

// body is lines in one format, compressed once.
type body struct {
	piece
	zstdMu sync.Mutex // held while zstd is made
	zstd   atomic.Pointer[[]byte]
}

// bodyOf compresses text.
func bodyOf(text []byte) *body {
	return &body{piece: piece{
		deflate: segment(func(w io.Writer) { _, _ = w.Write(text) }),
		crc:     crc32.ChecksumIEEE(text),
		size:    int64(len(text)),
		shift:   x8nModP(int64(len(text))),
	}}
}

// zstdFrame is the body as one zstd frame, made at the first zstd scrape (again after it was
// dropped).
func (b *body) zstdFrame() []byte {
	if z := b.zstd.Load(); z != nil {
		return *z
	}
	b.zstdMu.Lock()
	defer b.zstdMu.Unlock()
	if z := b.zstd.Load(); z != nil {
		return *z
	}
	var out bytes.Buffer
	out.Grow(int(b.size))
	if err := b.plain(&out); err != nil {
		return nil // cannot happen: the Set made the segment itself
	}
	z := zstdEncoder.EncodeAll(out.Bytes(), make([]byte, 0, len(b.deflate)))
	b.zstd.Store(&z)
	return z
}

// other returns the block's body in format fm (not formText: that is k.body), made now if it
// is not yet; d is its family's.
func (k *block) other(fm form, d *Desc) *body {
	if b := k.others[fm].Load(); b != nil {
		return b
	}
	k.othersMu.Lock()
	defer k.othersMu.Unlock()
	if b := k.others[fm].Load(); b != nil {
		return b
	}
	bufs := convertPool.Get().(*convertBufs)
	defer convertPool.Put(bufs)
	bufs.text.Reset()
	bufs.text.Grow(int(k.size))
	if err := k.plain(&bufs.text); err != nil {
		return &body{} // cannot happen: the Set made the segment itself
	}
	var out []byte
	switch fm {
	case formOpenMetrics:
		out = openMetricsLines(bufs.out[:0], bufs.text.Bytes())
	case formProto:
		out = protoMetrics(bufs.out[:0], d, bufs.text.Bytes())
	}
	if cap(out) <= maxPooled {
		bufs.out = out
	}
	if bufs.text.Cap() > maxPooled {
		bufs.text = bytes.Buffer{} // as textPool: large buffers would count as live
	}
	b := bodyOf(out)
	k.others[fm].Store(b)
	return b
}

// bodies appends the family's lines in format fm, block by block, made now where they are not
// yet.
func (f *Family) bodies(fm form, out []*body) []*body {
	for _, k := range f.blocks {
		if fm == formText {
			out = append(out, &k.body)
		} else {
			out = append(out, k.other(fm, f.desc))
		}
	}
	return out
}

// convertBufs are the buffers of one conversion: the block's text and the converted lines,
// reused.
type convertBufs struct {
	text bytes.Buffer
	out  []byte
}

var convertPool = sync.Pool{New: func() any { return new(convertBufs) }}

// prepare makes the bodies of the wanted formats of every block and drops the others, and the
// zstd frames unless zstd is wanted: a render makes them, so that a scrape does not (the zstd
// frames are made at the first zstd scrape, block by block).
func (s *Set) prepare(wanted [nForms + 1]bool, b *Builder) {
	for _, f := range s.Families {
		for _, k := range f.blocks {
			for fm := formOpenMetrics; fm < nForms; fm++ {
				switch {
				case wanted[fm] && k.others[fm].Load() == nil:
					b.yieldAfter(k.size)
					k.other(fm, f.desc)
				case !wanted[fm]:
					k.others[fm].Store(nil)
				}
			}
			if !wanted[formZstd] {
				k.dropZstd()
			}
		}
	}
}

// dropForms drops the forms of the Sets' blocks that drop says.
func dropForms(sets []*Set, drop [nForms + 1]bool) {
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, f := range s.Families {
			for _, k := range f.blocks {
				for fm := formOpenMetrics; fm < nForms; fm++ {
					if drop[fm] {
						k.others[fm].Store(nil)
					}
				}
				if drop[formZstd] {
					k.dropZstd()
				}
			}
		}
	}
}

// dropZstd drops the zstd frames of the block's bodies.
func (k *block) dropZstd() {
	k.zstd.Store(nil)
	for fm := formOpenMetrics; fm < nForms; fm++ {
		if b := k.others[fm].Load(); b != nil {
			b.zstd.Store(nil)
		}
	}
}

// openMetricsLines appends to out the text series lines as OpenMetrics 1.0 ones, which differ only in
// how a value is written: client_golang writes 1 as "1.0" and any integral value with ".0".
func openMetricsLines(out, text []byte) []byte {
	for len(text) > 0 {
		nl := bytes.IndexByte(text, '\n')
		line := text[:nl]
		text = text[nl+1:]
		out = append(out, line...)
		v := line[bytes.LastIndexByte(line, ' ')+1:]
		if !bytes.ContainsAny(v, "e.NI") { // not 1e+06, 0.5, NaN, +Inf, -Inf
			out = append(out, '.', '0')
		}
		out = append(out, '\n')
	}
	return out
}

// protoMetrics appends to out the text series lines of the family d as the Metric fields of a
// MetricFamily message (field 4, each a Metric with its label pairs sorted by name and its
// gauge or counter), as client_golang marshals a const metric.
func protoMetrics(out []byte, d *Desc, text []byte) []byte {
	var m, lp []byte
	for len(text) > 0 {
		nl := bytes.IndexByte(text, '\n')
		line := text[:nl]
		text = text[nl+1:]
		m = m[:0]
		i := len(d.name)
		for _, s := range d.slots {
			i += len(s.prefix)
			var v []byte
			v, i = unescapeValue(line, i)
			lp = protowire.AppendTag(lp[:0], 1, protowire.BytesType)
			lp = protowire.AppendString(lp, s.label)
			lp = protowire.AppendTag(lp, 2, protowire.BytesType)
			lp = protowire.AppendBytes(lp, v)
			m = protowire.AppendTag(m, 1, protowire.BytesType)
			m = protowire.AppendBytes(m, lp)
		}
		v, err := strconv.ParseFloat(string(line[bytes.LastIndexByte(line, ' ')+1:]), 64)
		if err != nil {
			v = math.NaN() // cannot happen: appendFloat wrote it
		}
		field := protowire.Number(2) // gauge
		if d.typ == prometheus.CounterValue {
			field = 3
		}
		m = protowire.AppendTag(m, field, protowire.BytesType)
		m = protowire.AppendVarint(m, 9)
		m = protowire.AppendTag(m, 1, protowire.Fixed64Type)
		m = binary.LittleEndian.AppendUint64(m, math.Float64bits(v))
		out = protowire.AppendTag(out, 4, protowire.BytesType)
		out = protowire.AppendBytes(out, m)
	}
	return out
}

// unescapeValue reads the escaped label value at l[i:] up to its closing quote and returns it
// and the offset after the quote.
func unescapeValue(l []byte, i int) ([]byte, int) {
	end := i
	for l[end] != '"' {
		if l[end] == '\\' {
			end++
		}
		end++
	}
	raw := l[i:end]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, end + 1
	}
	v := make([]byte, 0, len(raw))
	for k := 0; k < len(raw); k++ {
		c := raw[k]
		if c == '\\' {
			k++
			if c = raw[k]; c == 'n' {
				c = '\n'
			}
		}
		v = append(v, c)
	}
	return v, end + 1
}

// openMetricsHeader is the family's HELP and TYPE lines as client_golang writes them in
// OpenMetrics: a counter's metadata without its _total suffix, a counter without one typed
// unknown, quotes in the help escaped.
func (d *Desc) openMetricsHeader() *piece {
	d.omOnce.Do(func() {
		name, typ := d.name, "gauge"
		if d.typ == prometheus.CounterValue {
			typ = "unknown"
			if n, ok := strings.CutSuffix(name, "_total"); ok {
				name, typ = n, "counter"
			}
		}
		d.omText = "# HELP " + name + " " + omHelpEscaper.Replace(d.help) + "\n# TYPE " + name + " " + typ + "\n"
		d.omHead = pieceOf(d.omText)
	})
	return &d.omHead
}

var omHelpEscaper = strings.NewReplacer("\\", `\\`, "\n", `\n`, "\"", `\"`)

// protoHeader is the MetricFamily fields before the metrics: name, help and type.
func (d *Desc) protoHeader() []byte {
	d.protoOnce.Do(func() {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, d.name)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, d.help)
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		typ := uint64(1) // GAUGE
		if d.typ == prometheus.CounterValue {
			typ = 0 // COUNTER
		}
		d.protoHead = protowire.AppendVarint(b, typ)
	})
	return d.protoHead
}
