// What the web tests share: a Source that is a plain value, its handler, and the http_sd format.

package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// fakeSource answers as its fields say.
type fakeSource struct {
	reload              func() error // nil: reloads succeed
	unhealthy, notReady string
	status              Status
	discovery           Discovery
}

func (s *fakeSource) Reload() error {
	if s.reload == nil {
		return nil
	}
	return s.reload()
}
func (s *fakeSource) Unhealthy(time.Time) string      { return s.unhealthy }
func (s *fakeSource) NotReady() string                { return s.notReady }
func (s *fakeSource) Status() Status                  { return s.status }
func (s *fakeSource) Discovery() Discovery            { return s.discovery }
func (s *fakeSource) RenderedSets() []*exposition.Set { return nil }

// newHandler is Handler over src with a registry of its own, which it returns.
func newHandler(src Source, o HandlerOptions) (http.Handler, *prometheus.Registry) {
	if o.TelemetryPath == "" {
		o.TelemetryPath = "/metrics"
	}
	reg := prometheus.NewRegistry()
	m := Metrics{Live: reg, Rendered: prometheus.NewRegistry(), Renderer: exposition.NewRenderer()}
	return Handler(src, m, log.NewNopLogger(), o), reg
}

// newServer is the server over src with a registry of its own, and its handler.
func newServer(src Source) (*server, http.Handler) {
	reg := prometheus.NewRegistry()
	m := Metrics{Live: reg, Rendered: prometheus.NewRegistry(), Renderer: exposition.NewRenderer()}
	s := &server{src: src, logger: log.NewNopLogger(), sd: newSDGuard(reg)}
	return s, s.handler(m, HandlerOptions{TelemetryPath: "/metrics"})
}

func newTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveQuery sends GET path?query to h in-process and returns the status, content type and body.
func serveQuery(h http.Handler, path, query string) (int, string, []byte) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.URL.RawQuery = query
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
}

// sdGroup is one target group of Prometheus' http_sd format.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

func decodeSD(t *testing.T, body string) []sdGroup {
	t.Helper()
	var gs []sdGroup
	if err := json.Unmarshal([]byte(body), &gs); err != nil {
		t.Fatalf("not http_sd JSON: %v\n%.500s", err, body)
	}
	return gs
}

func diffSD(got, want []sdGroup) string {
	if reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d groups, want %d", len(got), len(want))
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w sdGroup
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "\n#%d: got  %v\n    want %v", i, g, w)
			break
		}
	}
	return b.String()
}
