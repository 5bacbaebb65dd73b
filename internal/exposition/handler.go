package exposition

// The /metrics handler: a scrape in text, OpenMetrics or delimited protobuf (every format
// Prometheus asks for) is written from the rendered Sets, already compressed, with the live
// families encoded and compressed between them; the protobuf text forms and name[] filters go
// to the fallback, which encodes everything live.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"sort"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// HandlerOpts configure Handler.
type HandlerOpts struct {
	Live     prometheus.Gatherer // families that are encoded at each scrape
	Sets     func() []*Set       // rendered families; a family in several Sets is written once, its series in Set order
	Fallback http.Handler        // every other request, with Live and the Sets' collectors
	// Renderer is shared with the Caches of the Sets: renders pause while a scrape is served,
	// and prepare the formats scrapers ask for. Nil: neither.
	Renderer *Renderer
	// DisableOpenMetrics answers OpenMetrics scrapers with the next format they accept, as
	// promhttp without EnableOpenMetrics; CreatedSamples adds the _created lines of the live
	// counters, histograms and summaries to OpenMetrics answers (promhttp's
	// EnableOpenMetricsTextCreatedSamples). Fallback must be configured alike.
	DisableOpenMetrics, CreatedSamples bool
	// ErrorLog and Errors (promhttp_metric_handler_errors_total by cause, may be nil) as in promhttp.
	ErrorLog promhttp.Logger
	Errors   *prometheus.CounterVec
	// MaxRequestsInFlight limits concurrent scrapes of either path (0: no limit).
	MaxRequestsInFlight int
}

// Handler serves /metrics.
func Handler(o HandlerOpts) http.Handler {
	var sem chan struct{}
	if o.MaxRequestsInFlight > 0 {
		sem = make(chan struct{}, o.MaxRequestsInFlight)
	}
	accepted := expfmt.DefaultOpenMetricsAcceptedFormats()
	if o.DisableOpenMetrics {
		accepted = expfmt.DefaultAcceptedFormats()
	}
	var gate *gate
	if o.Renderer != nil {
		gate = &o.Renderer.scrapes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			default:
				http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", o.MaxRequestsInFlight), http.StatusServiceUnavailable)
				return
			}
		}
		if gate != nil {
			gate.enter()
		}
		t := &turn{sem: sem, gate: gate, ctx: r.Context(), held: true}
		defer t.release()
		w = &socketWriter{ResponseWriter: w, turn: t}
		format := expfmt.NegotiateAccept(r.Header, accepted...)
		var kind form
		switch format.FormatType() {
		case expfmt.TypeTextPlain:
			kind = formText
		case expfmt.TypeOpenMetrics:
			kind = formOpenMetrics
		case expfmt.TypeProtoDelim:
			kind = formProto
		default: // the protobuf text forms, for people reading them
			o.Fallback.ServeHTTP(w, r)
			return
		}
		if r.URL != nil && r.URL.Query().Has("name[]") {
			o.Fallback.ServeHTTP(w, r)
			return
		}
		encoding := negotiateEncoding(r)
		if o.Renderer != nil {
			now := o.Renderer.clock()
			if kind != formText {
				o.Renderer.demand.asked(kind, now)
			}
			if encoding == "zstd" {
				o.Renderer.demand.asked(formZstd, now)
			}
			defer o.Renderer.sweep(o.Sets)
		}
		o.serve(w, format, kind, encoding)
	})
}

// turn is what a scrape holds while it works: a place under MaxRequestsInFlight and a count
// in the gate that pauses renders. It gives both up while it waits on the client's socket, so
// that a client that stops reading holds neither a place nor the renders (only its
// connection, until the write deadline the server sets drops it).
type turn struct {
	mu   sync.Mutex // a compressor of the fallback may write from its own goroutine
	sem  chan struct{}
	gate *gate
	ctx  context.Context
	held bool
}

func (t *turn) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.held {
		return
	}
	t.held = false
	if t.gate != nil {
		t.gate.leave()
	}
	if t.sem != nil {
		<-t.sem
	}
}

// take waits for a place again (the scrape was admitted: it queues rather than fail).
func (t *turn) take() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held {
		return nil
	}
	if t.sem != nil {
		select {
		case t.sem <- struct{}{}:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
	if t.gate != nil {
		t.gate.enter()
	}
	t.held = true
	return nil
}

// socketWriter is the response as a scrape writes it: each write to the client's socket is
// made without the scrape's turn.
type socketWriter struct {
	http.ResponseWriter
	turn *turn
}

func (s *socketWriter) Write(p []byte) (int, error) {
	s.turn.release()
	n, err := s.ResponseWriter.Write(p)
	if terr := s.turn.take(); err == nil && terr != nil {
		err = terr
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (write deadlines).
func (s *socketWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (o *HandlerOpts) count(cause string) {
	if o.Errors != nil {
		o.Errors.WithLabelValues(cause).Inc()
	}
}

func (o *HandlerOpts) serve(w http.ResponseWriter, format expfmt.Format, kind form, encoding string) {
	// The Sets before the live families: a collector that starts between the two shows its
	// live families without its rendered ones, never the reverse.
	rendered := groups(o.Sets())
	mfs, err := o.Live.Gather()
	if err != nil {
		if o.ErrorLog != nil {
			o.ErrorLog.Println("error gathering metrics:", err)
		}
		o.count("gathering")
	}

	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Accept-Encoding")
	w.Header().Set("Content-Type", string(format))
	out := newScrapeWriter(w, encoding)
	defer out.release()
	out.kind, out.escaping = kind, format.ToEscapingScheme()
	if o.CreatedSamples {
		out.omOpts = createdLines
	}

	// Live and rendered families merged by name, as one Gather would sort them.
	i, j := 0, 0
	for (i < len(mfs) || j < len(rendered)) && out.err == nil {
		if j == len(rendered) || i < len(mfs) && mfs[i].GetName() < rendered[j].name {
			out.live(mfs[i], nil, o)
			i++
			continue
		}
		bodies := rendered[j].bodies(kind)
		if i < len(mfs) && mfs[i].GetName() == rendered[j].name {
			out.live(mfs[i], bodies, o) // the header is the live family's
			i++
		} else {
			out.header(rendered[j].fams[0].desc, bodies)
		}
		out.families++
		for _, b := range bodies {
			out.body(b)
		}
		j++
	}
	if kind == formOpenMetrics {
		out.pending.WriteString("# EOF\n")
	}
	out.close()
	if out.err != nil {
		// Every family not sent is an error, as promhttp counts them.
		for n := len(mfs) + len(rendered) - out.sent; n > 0; n-- {
			if o.ErrorLog != nil {
				o.ErrorLog.Println("error encoding and sending metric family:", out.err)
			}
			o.count("encoding")
		}
	}
}

var createdLines = []expfmt.EncoderOption{expfmt.WithCreatedLines()}

type group struct {
	name string
	fams []*Family
}

// bodies are the group's lines in the format kind, block by block, made now where they are
// not yet.
func (g group) bodies(kind form) []*body {
	var out []*body
	for _, f := range g.fams {
		out = f.bodies(kind, out)
	}
	return out
}

// groups merges the families of the Sets by name, sorted.
func groups(sets []*Set) []group {
	var gs []group
	idx := make(map[string]int)
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, f := range s.Families {
			k, ok := idx[f.Name]
			if !ok {
				k = len(gs)
				idx[f.Name] = k
				gs = append(gs, group{name: f.Name})
			}
			gs[k].fams = append(gs[k].fams, f)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
	return gs
}

// negotiateEncoding picks identity, gzip or zstd as promhttp does for the same offers: the
// highest q wins, the first offer of equal q.
func negotiateEncoding(r *http.Request) string {
	best, bestQ := "identity", -1.0
	specs := parseAcceptEncoding(r.Header.Values("Accept-Encoding"))
	for _, offer := range []string{"identity", "gzip", "zstd"} {
		for _, s := range specs {
			if s.q > bestQ && (s.value == "*" || s.value == offer) {
				best, bestQ = offer, s.q
			}
		}
	}
	if bestQ == 0 {
		return "identity" // promhttp falls back to uncompressed as well
	}
	return best
}

// scrapeWriter writes one response: pending holds live text not yet written; family writes a
// rendered family's lines in the response's encoding.
type scrapeWriter struct {
	w        io.Writer // bw, or the response when bw failed
	bw       *bufio.Writer
	encoding string
	pending  bytes.Buffer
	kind     form
	escaping model.EscapingScheme
	omOpts   []expfmt.EncoderOption

	crc  uint32 // gzip: of everything written so far
	size int64
	fw   *flate.Writer
	err  error
	// families counts the families begun, sent those whose bytes all reached the response.
	families, sent int
}

// live encodes a live family into pending; rendered are the bodies of the rendered family of
// the same name, which follow it in one protobuf message.
func (s *scrapeWriter) live(mf *dto.MetricFamily, rendered []*body, o *HandlerOpts) {
	s.families++
	mf = escaped(mf, s.escaping)
	var err error
	switch s.kind {
	case formText:
		_, err = expfmt.MetricFamilyToText(&s.pending, mf)
	case formOpenMetrics:
		_, err = expfmt.MetricFamilyToOpenMetrics(&s.pending, mf, s.omOpts...)
	case formProto:
		var msg []byte
		if msg, err = proto.Marshal(mf); err == nil {
			s.delimit(int64(len(msg)), rendered)
			s.pending.Write(msg)
		}
	}
	if err != nil {
		if o.ErrorLog != nil {
			o.ErrorLog.Println("error encoding and sending metric family:", err)
		}
		o.count("encoding")
	}
}

// escaped is mf as the negotiated escaping wants it. model.EscapeMetricFamily copies every
// family it is given, even when no name needs escaping (ours never do), and a scrape should
// make next to no garbage.
func escaped(mf *dto.MetricFamily, scheme model.EscapingScheme) *dto.MetricFamily {
	if scheme == model.NoEscaping || !needsEscaping(mf) {
		return mf
	}
	return model.EscapeMetricFamily(mf, scheme)
}

// needsEscaping says whether a name of mf is not a legacy one (as model's own check).
func needsEscaping(mf *dto.MetricFamily) bool {
	if !model.LegacyValidation.IsValidMetricName(mf.GetName()) {
		return true
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if !model.LegacyValidation.IsValidMetricName(l.GetName()) || l.GetName() == model.MetricNameLabel && !model.LegacyValidation.IsValidMetricName(l.GetValue()) {
				return true
			}
		}
	}
	return false
}

// delimit writes the length of a protobuf MetricFamily: head bytes and the bodies.
func (s *scrapeWriter) delimit(head int64, bodies []*body) {
	n := head
	for _, b := range bodies {
		n += b.size
	}
	var v [binary.MaxVarintLen64]byte
	s.pending.Write(v[:binary.PutUvarint(v[:], uint64(n))])
}

var (
	flatePool   sync.Pool
	scratchPool = sync.Pool{New: func() any { return new([]byte) }}
)

// writerPool keeps scrapeWriters with their buffers: a scrape allocates next to nothing, so
// that scrapes in a row do not make the collector run (a collection during a scrape is what
// makes its tail).
var writerPool = sync.Pool{New: func() any { return &scrapeWriter{bw: bufio.NewWriterSize(nil, outBuffer)} }}

// outBuffer is what a scrape gathers before writing to the connection: rendered families are
// mostly small, and net/http would otherwise write each in 4 KiB pieces, a system call each.
const outBuffer = 128 << 10

func newScrapeWriter(w http.ResponseWriter, encoding string) *scrapeWriter {
	s := writerPool.Get().(*scrapeWriter)
	s.bw.Reset(w)
	s.w, s.encoding = s.bw, encoding
	if encoding != "identity" {
		w.Header().Set("Content-Encoding", encoding)
	}
	if encoding == "gzip" {
		// RFC 1952 header: deflate, no flags, no time, unknown OS.
		s.write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255})
	}
	return s
}

func (s *scrapeWriter) write(p []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(p)
	}
}

// flush writes the pending live text in the response's encoding.
func (s *scrapeWriter) flush() {
	p := s.pending.Bytes()
	if len(p) == 0 || s.err != nil {
		s.pending.Reset()
		s.confirm()
		return
	}
	switch s.encoding {
	case "gzip":
		s.crc = crc32.Update(s.crc, crc32.IEEETable, p)
		s.size += int64(len(p))
		if s.fw == nil {
			if fw, ok := flatePool.Get().(*flate.Writer); ok {
				s.fw = fw
			} else {
				s.fw, _ = flate.NewWriter(nil, flate.BestSpeed)
			}
		}
		// A new deflate segment: no reference back into what a rendered family wrote between.
		s.fw.Reset(errWriter{s})
		_, _ = s.fw.Write(p)
		_ = s.fw.Flush()
	case "zstd":
		bp := scratchPool.Get().(*[]byte)
		*bp = zstdEncoder.EncodeAll(p, (*bp)[:0])
		s.write(*bp)
		scratchPool.Put(bp)
	default:
		s.write(p)
	}
	s.pending.Reset()
	s.confirm()
}

// confirm counts the families begun so far as sent while nothing failed.
func (s *scrapeWriter) confirm() {
	if s.err == nil {
		s.sent = s.families
	}
}

// errWriter feeds the flate writer's output to the response, keeping the first error.
type errWriter struct{ s *scrapeWriter }

func (e errWriter) Write(p []byte) (int, error) {
	e.s.write(p)
	return len(p), e.s.err
}

// header writes a rendered family's metadata: its HELP and TYPE lines (in a gzip response as
// compressed at the first render, unless live text waits to be written before them), or the
// length and the name, help and type fields of its protobuf message.
func (s *scrapeWriter) header(d *Desc, bodies []*body) {
	var text string
	var p *piece
	switch s.kind {
	case formText:
		text, p = d.header, d.compressedHeader()
	case formOpenMetrics:
		p = d.openMetricsHeader()
		text = d.omText
	case formProto:
		h := d.protoHeader()
		s.delimit(int64(len(h)), bodies)
		s.pending.Write(h)
		return
	}
	if s.encoding != "gzip" || s.pending.Len() > 0 {
		s.pending.WriteString(text)
		return
	}
	s.piece(p)
}

// piece writes text compressed beforehand to a gzip response.
func (s *scrapeWriter) piece(p *piece) {
	s.write(p.deflate)
	s.crc = p.after(s.crc)
	s.size += p.size
}

// body writes a rendered family's lines (its header is written or pending).
func (s *scrapeWriter) body(f *body) {
	s.flush()
	switch s.encoding {
	case "gzip":
		s.piece(&f.piece)
	case "zstd":
		s.write(f.zstdFrame())
	default:
		if s.err == nil {
			if err := f.plain(s.w); err != nil {
				s.err = err
			}
		}
	}
}

func (s *scrapeWriter) close() {
	s.flush()
	if s.encoding == "gzip" {
		var trailer [10]byte
		copy(trailer[:], finalBlock)
		binary.LittleEndian.PutUint32(trailer[2:], s.crc)
		binary.LittleEndian.PutUint32(trailer[6:], uint32(s.size))
		s.write(trailer[:])
	}
	if s.err == nil {
		s.err = s.bw.Flush()
	}
	if s.err != nil {
		s.sent = min(s.sent, s.families-1) // the last family's end was not sent
	}
}

func (s *scrapeWriter) release() {
	if s.fw != nil {
		s.fw.Reset(nil)
		flatePool.Put(s.fw)
	}
	s.bw.Reset(nil)
	s.pending.Reset()
	*s = scrapeWriter{bw: s.bw, pending: s.pending}
	writerPool.Put(s)
}
