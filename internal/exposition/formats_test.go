package exposition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// The Accept headers Prometheus 3 sends: by default (OpenMetrics first) and with
// scrape_native_histograms (protobuf first); and Prometheus 2's (text first).
const (
	acceptProm3   = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
	acceptNative  = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
	acceptProm2   = "application/openmetrics-text;version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
	acceptOM001   = "application/openmetrics-text;version=0.0.1"
	acceptProtoV1 = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)

// scrapeCase is one (Accept header, Content-Type expected) pair.
var scrapeCases = []struct {
	name, accept, contentType string
}{
	{"prometheus 3", acceptProm3, "application/openmetrics-text; version=1.0.0"},
	{"openmetrics 0.0.1", acceptOM001, "application/openmetrics-text; version=0.0.1"},
	{"prometheus 2", acceptProm2, "application/openmetrics-text; version=0.0.1"},
	{"native histograms", acceptNative, "application/vnd.google.protobuf"},
	{"protobuf", acceptProtoV1, "application/vnd.google.protobuf"},
}

// TestEveryFormatIsWhatClientGolangWrites: OpenMetrics scrapes from rendered Sets are byte
// for byte what promhttp writes with OpenMetrics on; protobuf scrapes decode to the same
// families, metric by metric, as promhttp's; in every encoding, with and without the bodies
// made ahead by a render.
func TestEveryFormatIsWhatClientGolangWrites(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 11))
		ctrls := controllers(r, "alpha", "beta", "gamma")[:1+r.IntN(3)]
		live, full := registries()
		rd := NewRenderer()
		var sets []*Set
		for _, c := range ctrls {
			full.MustRegister(c)
			var b Builder
			set := c.render(&b, nil)
			if seed%2 == 1 { // as a Cache does once a scraper asked: bodies made at the render
				set.prepare([nForms + 1]bool{formOpenMetrics: true, formProto: true}, &b)
			}
			sets = append(sets, set)
		}
		ref := promhttp.HandlerFor(full, promhttp.HandlerOpts{EnableOpenMetrics: true})
		h := Handler(HandlerOpts{Live: live, Sets: func() []*Set { return sets }, Fallback: ref, Renderer: rd})
		for _, sc := range scrapeCases {
			wresp, want := get(t, ref, sc.accept, "identity")
			if !strings.HasPrefix(wresp.Header.Get("Content-Type"), sc.contentType) {
				t.Fatalf("%s: the reference answers %q", sc.name, wresp.Header.Get("Content-Type"))
			}
			for _, enc := range []string{"gzip", "zstd", "identity"} {
				resp, body := get(t, h, sc.accept, enc)
				if ct := resp.Header.Get("Content-Type"); ct != wresp.Header.Get("Content-Type") {
					t.Fatalf("seed %d, %s, %s: Content-Type %q, client_golang %q", seed, sc.name, enc, ct, wresp.Header.Get("Content-Type"))
				}
				if v := resp.Header.Values("Vary"); len(v) != 2 || v[0] != "Accept" {
					t.Errorf("Vary %q", v)
				}
				got := decode(t, enc, body)
				if strings.HasPrefix(sc.contentType, "application/vnd.google.protobuf") {
					sameFamilies(t, got, want)
					continue
				}
				if !bytes.HasSuffix(got, []byte("\n# EOF\n")) {
					t.Fatalf("%s: no # EOF at the end", sc.name)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("seed %d, %s, %q: the scrape differs from client_golang's:\n%s", seed, sc.name, enc, firstDiff(got, want))
				}
			}
		}
		if w := rd.demand.wanted(time.Now()); !w[formOpenMetrics] || !w[formProto] {
			t.Errorf("after scrapes in both formats the renderer wants %v", w)
		}
	}
}

// sameFamilies decodes two delimited protobuf bodies and compares them family by family,
// metric by metric (every label, value and type).
func sameFamilies(t *testing.T, got, want []byte) {
	t.Helper()
	g, w := readDelimited(t, got), readDelimited(t, want)
	if len(g) != len(w) {
		t.Fatalf("%d families, client_golang %d", len(g), len(w))
	}
	for i := range g {
		if proto.Equal(g[i], w[i]) {
			continue
		}
		gm, wm := g[i].Metric, w[i].Metric
		for k := range min(len(gm), len(wm)) {
			if !proto.Equal(gm[k], wm[k]) {
				t.Fatalf("family %s, metric %d:\n got %v\nwant %v", w[i].GetName(), k, gm[k], wm[k])
			}
		}
		g[i].Metric, w[i].Metric = nil, nil
		t.Fatalf("family %s: %d metrics, client_golang %d; without them\n got %v\nwant %v", w[i].GetName(), len(gm), len(wm), g[i], w[i])
	}
	if len(g) < 5 || len(g[1].Metric) == 0 {
		t.Fatalf("too few families to compare: %v", g)
	}
}

func readDelimited(t *testing.T, b []byte) []*dto.MetricFamily {
	t.Helper()
	var out []*dto.MetricFamily
	r := bytes.NewReader(b)
	for {
		mf := &dto.MetricFamily{}
		err := protodelim.UnmarshalFrom(r, mf)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("family %d: %v", len(out), err)
		}
		out = append(out, mf)
	}
}

// TestDisableOpenMetrics: with OpenMetrics off, a Prometheus 3 scrape gets text, as from
// promhttp without EnableOpenMetrics.
func TestDisableOpenMetrics(t *testing.T) {
	full := prometheus.NewRegistry()
	for _, c := range liveCollectors() {
		full.MustRegister(c)
	}
	h := Handler(HandlerOpts{Live: full, Sets: func() []*Set { return nil }, Fallback: promhttp.HandlerFor(full, promhttp.HandlerOpts{}), DisableOpenMetrics: true})
	resp, body := get(t, h, acceptProm3, "")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, string(expfmt.FmtText)) || bytes.Contains(body, []byte("# EOF")) {
		t.Errorf("OpenMetrics disabled, yet %q:\n%s", ct, body)
	}
}

// TestUnwantedFormatsAreDropped: a render makes the bodies of the formats asked for within
// keepForm and drops the bodies of the others.
func TestUnwantedFormatsAreDropped(t *testing.T) {
	rd := NewRenderer()
	d := NewDesc("x_total", "X.", prometheus.CounterValue, []string{"k"}, nil)
	c := NewCache(rd, Pace{}, func(s Sink) { s.Add(d, 1, "a") }, nil)
	f := c.Set().Families[0]
	if f.blocks[0].others[formProto].Load() != nil {
		t.Fatal("protobuf made before anyone asked")
	}
	rd.demand.asked(formProto, time.Now())
	c.Render()
	if f := c.Set().Families[0]; f.blocks[0].others[formProto].Load() == nil || f.blocks[0].others[formOpenMetrics].Load() != nil {
		t.Fatal("asked for protobuf only: made another format, or not protobuf")
	}
	rd.demand.asked(formProto, time.Now().Add(-keepForm-time.Second))
	c.Render()
	if f := c.Set().Families[0]; f.blocks[0].others[formProto].Load() != nil {
		t.Fatal("protobuf still kept after keepForm without a scrape")
	}
}

// TestLiveAndRenderedFamilyOfOneName: a live family that shares its name with a rendered one
// (another controller's series of the same family) is one family in every format: in protobuf
// one message holding the live metrics and the rendered ones, as client_golang gathers them.
func TestLiveAndRenderedFamilyOfOneName(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	ctrls := controllers(r, "alpha", "beta")
	live, full := registries()
	shared := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "b_status",
		Help:        "Help of b_status with a \\ backslash\nand a newline.",
		ConstLabels: prometheus.Labels{"controller": "delta"}}, []string{"domain_id", "status"})
	shared.WithLabelValues("x", "up").Set(1)
	live.MustRegister(shared)
	full.MustRegister(shared)
	var sets []*Set
	for _, c := range ctrls {
		full.MustRegister(c)
		var b Builder
		sets = append(sets, c.render(&b, nil))
	}
	ref := promhttp.HandlerFor(full, promhttp.HandlerOpts{EnableOpenMetrics: true})
	h := Handler(HandlerOpts{Live: live, Sets: func() []*Set { return sets }, Fallback: ref})
	_, want := get(t, ref, acceptNative, "identity")
	_, got := get(t, h, acceptNative, "gzip")
	g, w := readDelimited(t, decode(t, "gzip", got)), readDelimited(t, want)
	index := func(mfs []*dto.MetricFamily) map[string]*dto.MetricFamily {
		m := map[string]*dto.MetricFamily{}
		for _, mf := range mfs {
			if _, dup := m[mf.GetName()]; dup {
				t.Fatalf("family %s twice", mf.GetName())
			}
			m[mf.GetName()] = mf
		}
		return m
	}
	gi, wi := index(g), index(w)
	gs, ws := gi["b_status"], wi["b_status"]
	if gs == nil || len(gs.Metric) != len(ws.Metric) || gs.GetHelp() != ws.GetHelp() || gs.GetType() != ws.GetType() {
		t.Fatalf("b_status: got %d metrics, client_golang %d", len(gs.GetMetric()), len(ws.GetMetric()))
	}
	// client_golang sorts the metrics of a family; the handler writes the live ones first.
	byLabels := map[string]*dto.Metric{}
	for _, m := range ws.Metric {
		byLabels[fmt.Sprint(m.GetLabel())] = m
	}
	for _, m := range gs.Metric {
		if w := byLabels[fmt.Sprint(m.GetLabel())]; !proto.Equal(m, w) {
			t.Errorf("b_status metric %v, client_golang's %v", m, w)
		}
	}
	_, om := get(t, h, acceptProm3, "identity")
	if n := bytes.Count(om, []byte("# TYPE b_status gauge\n")); n != 1 {
		t.Errorf("OpenMetrics: %d TYPE lines of b_status, want 1", n)
	}
}

// held counts the blocks of s holding each form: OpenMetrics, protobuf, and zstd frames (of
// any body).
func held(s *Set) (om, pb, zs, blocks int) {
	for _, f := range s.Families {
		for _, k := range f.blocks {
			blocks++
			if k.others[formOpenMetrics].Load() != nil {
				om++
			}
			p := k.others[formProto].Load()
			if p != nil {
				pb++
			}
			if k.zstd.Load() != nil || p != nil && p.zstd.Load() != nil {
				zs++
			}
		}
	}
	return om, pb, zs, blocks
}

// TestFormatsNotAskedAreNotHeld: a site that scrapes one format holds that one. The protobuf
// bodies and zstd frames scrapes made are dropped from every block once nobody asked for them
// for keepForm, at the next scrape of any format and without a render, and made again when
// asked again; OpenMetrics, never asked, is never made.
func TestFormatsNotAskedAreNotHeld(t *testing.T) {
	rd := NewRenderer()
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	rd.now = func() time.Time { return now }
	d := NewDesc("veil_domain_cpus", "CPUs.", prometheus.GaugeValue, []string{"domain_id"}, nil)
	c := NewCache(rd, Pace{}, func(s Sink) {
		for i := range 3000 {
			s.Add(d, float64(i%8), fmt.Sprintf("vm-%05d", i))
		}
	}, nil)
	h := Handler(HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*Set { return []*Set{c.Set()} }, Renderer: rd})
	check := func(what string, wantOM, wantPB, wantZS bool) {
		t.Helper()
		om, pb, zs, n := held(c.Set())
		if n < 5 {
			t.Fatalf("%d blocks: the test proves little", n)
		}
		all := func(got int, want bool) bool { return want && got == n || !want && got == 0 }
		if !all(om, wantOM) || !all(pb, wantPB) || !all(zs, wantZS) {
			t.Fatalf("%s: of %d blocks %d hold OpenMetrics (want all: %v), %d protobuf (%v), %d zstd (%v)", what, n, om, wantOM, pb, wantPB, zs, wantZS)
		}
	}
	check("before any scrape", false, false, false)
	get(t, h, acceptNative, "zstd")
	check("after a protobuf scrape in zstd", false, true, true)
	now = now.Add(keepForm - time.Minute)
	_, body := get(t, h, "text/plain", "gzip")
	check("a text scrape before keepForm", false, true, true)
	now = now.Add(time.Minute)
	_, again := get(t, h, "text/plain", "gzip")
	check("a text scrape keepForm after the last protobuf and zstd ones", false, false, false)
	if !bytes.Equal(decode(t, "gzip", body), decode(t, "gzip", again)) {
		t.Fatal("the text scrape changed when the other forms were dropped")
	}
	c.Render()
	check("a render after", false, false, false)
	get(t, h, acceptNative, "identity")
	check("protobuf asked again", false, true, false)
	c.Render()
	check("a render while protobuf is asked for", false, true, false)
}
