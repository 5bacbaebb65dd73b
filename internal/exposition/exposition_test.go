package exposition

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// row is one series of a renderable family.
type row struct {
	d      *Desc
	typ    prometheus.ValueType
	v      float64
	labels []string
}

// renderable is a collector whose series are rendered by a Builder and, for the reference, sent
// to client_golang as const metrics.
type renderable struct{ rows []row }

func (r *renderable) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*Desc]bool{}
	for _, x := range r.rows {
		if !seen[x.d] {
			seen[x.d] = true
			ch <- x.d.Prom
		}
	}
}

func (r *renderable) Collect(ch chan<- prometheus.Metric) {
	for _, x := range r.rows {
		if m, err := prometheus.NewConstMetric(x.d.Prom, x.typ, x.v, x.labels...); err == nil {
			ch <- m
		}
	}
}

func (r *renderable) render(b *Builder, prev *Set) *Set {
	for _, x := range r.rows {
		b.Add(x.d, x.v, x.labels...)
	}
	return b.finishSince(prev)
}

var nasty = []string{"", "a", "ab", "a b", "a!", "a\"b", `a\b`, "a\nb", "Ä", "日本", "z", " ", "!", "\"", `\`, "\t", "web 2", "web", "web-1", "\xff\xfe", "\x00", "a\x00", "a\x00b", "a\x01"}

func randomValue(r *rand.Rand) float64 {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return -1
	case 3:
		return math.NaN()
	case 4:
		return math.Inf(1)
	case 5:
		return math.Inf(-1)
	case 6:
		return math.Copysign(0, -1)
	case 7:
		return float64(r.Int64N(1 << 50))
	}
	return r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
}

func randomLabel(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return nasty[r.IntN(len(nasty))]
	}
	return fmt.Sprintf("%x", r.Uint32()%512)
}

// controllers builds one renderable per controller with the same families; the controller is
// the first label in sorted order of every family, as for the exporter's domain families.
func controllers(r *rand.Rand, names ...string) []*renderable {
	type fam struct {
		name   string
		typ    prometheus.ValueType
		labels []string
	}
	fams := []fam{
		{"b_info", prometheus.GaugeValue, []string{"domain", "domain_id", "tags"}},
		{"b_status", prometheus.GaugeValue, []string{"domain_id", "status"}},
		{"d_bytes_total", prometheus.CounterValue, []string{"interface", "domain_id"}},
		{"d_up", prometheus.GaugeValue, nil},
		{"x_os_info", prometheus.GaugeValue, []string{"os_name", "domain_id", "machine", "pretty_name", "version", "zz"}},
	}
	var out []*renderable
	for _, c := range names {
		rc := &renderable{}
		for _, f := range fams {
			d := NewDesc(f.name, "Help of "+f.name+" with a \\ backslash\nand a newline.", f.typ, f.labels, prometheus.Labels{"controller": c})
			n := 1
			if len(f.labels) > 0 {
				n = 1 + r.IntN(300)
			}
			seen := map[string]bool{}
			for range n {
				labels := make([]string, len(f.labels))
				for i := range labels {
					labels[i] = randomLabel(r)
				}
				if k := strings.Join(labels, "\x00"); seen[k] {
					continue // client_golang refuses a repeated label set
				} else {
					seen[k] = true
				}
				rc.rows = append(rc.rows, row{d: d, typ: f.typ, v: randomValue(r), labels: labels})
			}
		}
		out = append(out, rc)
	}
	return out
}

// liveCollectors are families that stay live, named to fall before, between and after the
// rendered ones.
func liveCollectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, n := range []string{"a_live", "c_live", "d_live_total", "z_live"} {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: "Live " + n + "."}, []string{"k"})
		g.WithLabelValues("x").Set(1.5)
		g.WithLabelValues("y").Set(-2)
		cs = append(cs, g)
	}
	return cs
}

// registries returns a registry of the live families and one that will hold every family
// (the reference, encoded by client_golang), the live ones registered in both.
func registries() (live, full *prometheus.Registry) {
	live, full = prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, c := range liveCollectors() {
		live.MustRegister(c)
		full.MustRegister(c)
	}
	return live, full
}

func get(t *testing.T, h http.Handler, accept, encoding string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	resp := w.Result()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	return resp, body
}

func decode(t *testing.T, encoding string, body []byte) []byte {
	t.Helper()
	switch encoding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		zr.Multistream(false) // one member: what every gzip client reads
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		if rest, _ := io.ReadAll(zr); len(rest) > 0 {
			t.Fatalf("%d bytes after the gzip member", len(rest))
		}
		return out
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		return out
	}
	return body
}

// TestScrapeIsWhatClientGolangWrites: the text of a scrape from rendered Sets and live families,
// in every encoding, is byte for byte what promhttp writes for the same series encoded live.
func TestScrapeIsWhatClientGolangWrites(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		ctrls := controllers(r, "alpha", "beta", "gamma")[:1+r.IntN(3)]
		live, full := registries()
		var sets []*Set
		for _, c := range ctrls {
			full.MustRegister(c)
			var b Builder
			sets = append(sets, c.render(&b, nil))
		}
		want := func() []byte {
			_, body := get(t, promhttp.HandlerFor(full, promhttp.HandlerOpts{}), "text/plain", "identity")
			return body
		}()
		if !bytes.Contains(want, []byte("b_info{")) || !bytes.Contains(want, []byte("a_live{")) {
			t.Fatalf("seed %d: the reference lacks families:\n%s", seed, want)
		}
		h := Handler(HandlerOpts{Live: live, Sets: func() []*Set { return sets }, Fallback: promhttp.HandlerFor(full, promhttp.HandlerOpts{})})
		for _, enc := range []string{"gzip", "zstd", "identity", ""} {
			resp, body := get(t, h, "", enc)
			want := enc
			if enc == "" {
				want = "identity" // as promhttp: no Accept-Encoding, no compression
			}
			if got := resp.Header.Get("Content-Encoding"); got != strings.TrimPrefix(want, "identity") {
				t.Errorf("seed %d, %q: Content-Encoding %q", seed, enc, got)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
				t.Errorf("Content-Type %q", ct)
			}
			got := decode(t, want, body)
			if !bytes.Equal(got, wantText(t, full)) {
				t.Fatalf("seed %d, %q: the scrape differs from client_golang's:\n%s", seed, enc, firstDiff(got, wantText(t, full)))
			}
		}
	}
}

func wantText(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	_, body := get(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), "text/plain", "identity")
	return body
}

func firstDiff(got, want []byte) string {
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			return fmt.Sprintf("line %d\n got: %q\nwant: %q", i+1, gl[i], wl[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(gl), len(wl))
}

// TestFinishKeepsUnchangedFamilies: a family whose lines did not change keeps its compressed
// form; one that changed is compressed again; a repeated label set is written once.
func TestFinishKeepsUnchangedFamilies(t *testing.T) {
	a := NewDesc("a", "A.", prometheus.GaugeValue, []string{"id"}, nil)
	b := NewDesc("b", "B.", prometheus.GaugeValue, []string{"id"}, nil)
	var bl Builder
	bl.Add(a, 1, "x")
	bl.Add(b, 1, "x")
	first := bl.Finish()
	bl.since(first)
	bl.Add(a, 1, "x")
	bl.Flush() // a compressed (kept from first), its text released
	bl.Add(b, 2, "x")
	bl.Add(b, 3, "x") // the same label set again: dropped
	second := bl.Finish()
	if len(second.Families) != 2 || second.Families[0] != first.Families[0] {
		t.Fatalf("family a was compressed again: %v", second.Families)
	}
	if second.Families[1] == first.Families[1] {
		t.Fatal("family b changed but kept its old bytes")
	}
	text, err := Families([]*Set{second})
	if err != nil {
		t.Fatal(err)
	}
	if want := "# HELP a A.\n# TYPE a gauge\na{id=\"x\"} 1\n# HELP b B.\n# TYPE b gauge\nb{id=\"x\"} 2\n"; string(text) != want {
		t.Errorf("text\n%s\nwant\n%s", text, want)
	}
	if third := bl.finishSince(second); len(third.Families) != 0 {
		t.Errorf("nothing added, yet %d families", len(third.Families))
	}
}

// TestOtherFormatsAreLive: the protobuf text forms and name[] filters get the fallback's
// answer.
func TestOtherFormatsAreLive(t *testing.T) {
	full := prometheus.NewRegistry()
	for _, c := range liveCollectors() {
		full.MustRegister(c)
	}
	fallback := promhttp.HandlerFor(full, promhttp.HandlerOpts{})
	h := Handler(HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*Set { return nil }, Fallback: fallback})
	// (prototext varies its spacing on purpose: "name: " or "name:  ".)
	resp, body := get(t, h, "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text", "")
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "encoding=text") || !regexp.MustCompile(`name:\s+"c_live"`).Match(body) {
		t.Errorf("protobuf text asked, got %q:\n%s", ct, body)
	}
	req := httptest.NewRequest("GET", "/metrics?name[]=c_live", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if body := w.Body.String(); !strings.Contains(body, "c_live{") || strings.Contains(body, "a_live") {
		t.Errorf("name[]=c_live answered\n%s", body)
	}
}

// TestMaxRequestsInFlight: a scrape beyond the limit is refused with 503 while one runs.
func TestMaxRequestsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	h := Handler(HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*Set { return nil }, Fallback: slow, MaxRequestsInFlight: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	<-entered
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	close(release)
	<-done
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("second scrape: %d, want 503", w.Code)
	}
}

// TestLargeFamily: a family of many blocks and with more series than a render adds between
// yields comes out whole, in order or sorted.
func TestLargeFamily(t *testing.T) {
	d := NewDesc("big", "Big.", prometheus.GaugeValue, []string{"id"}, nil)
	for _, sorted := range []bool{true, false} {
		var b Builder
		var want strings.Builder
		want.WriteString("# HELP big Big.\n# TYPE big gauge\n")
		const n = 30000
		for i := range n {
			want.WriteString(fmt.Sprintf("big{id=\"%08d-padding-padding-padding\"} %d\n", i, i))
		}
		for i := range n {
			k := i
			if !sorted {
				k = (i * 7919) % n // every index once, out of order
			}
			b.Add(d, float64(k), fmt.Sprintf("%08d-padding-padding-padding", k))
		}
		set := b.Finish()
		if k := len(set.Families[0].blocks); k < n/blockLines.max {
			t.Fatalf("the family has %d blocks: the test proves little", k)
		}
		got, err := Families([]*Set{set})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Fatalf("sorted=%v: %s", sorted, firstDiff(got, []byte(want.String())))
		}
	}
}

// TestLabelValuesAreBounded: a label value over MaxLabelValueBytes is cut at a character
// boundary to end in "…" within the bound, counted, and the caller's slice is left as it was.
func TestLabelValuesAreBounded(t *testing.T) {
	d := NewDesc("veil_test_info", "Test.", prometheus.GaugeValue, []string{"a", "b"}, nil)
	long := strings.Repeat("я", 1000) // 2,000 bytes
	labels := []string{"short", long}
	before := LabelValuesCut()
	var b Builder
	b.Add(d, 1, labels...)
	out, err := Families([]*Set{b.Finish()})
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	_, after, ok := strings.Cut(text, `b="`)
	value, _, _ := strings.Cut(after, `"`)
	if !ok || len(value) > MaxLabelValueBytes || !strings.HasSuffix(value, "…") || !utf8.ValidString(value) || !strings.HasPrefix(long, strings.TrimSuffix(value, "…")) {
		t.Errorf("label value of %d bytes, want at most %d ending in …: %.80q", len(value), MaxLabelValueBytes, value)
	}
	if LabelValuesCut() != before+1 {
		t.Errorf("cut counted %d times, want 1", LabelValuesCut()-before)
	}
	if labels[1] != long {
		t.Error("the caller's label slice was changed")
	}
}
