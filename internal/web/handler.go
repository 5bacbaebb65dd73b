// The endpoints: /metrics, /-/healthy, /-/ready, /-/reload, /sd/domains and the status page on /.

package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/promhttp/zstd" // zstd offered to scrapers

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// HandlerOptions are the --web.* flags of the metrics handler.
type HandlerOptions struct {
	TelemetryPath          string
	MaxRequests            int  // parallel scrapes at most; 0: no limit
	DisableExporterMetrics bool // no go_*, process_*, promhttp_*
	DisableOpenMetrics     bool // answer OpenMetrics scrapers with their next choice
	CreatedSamples         bool // _created lines in OpenMetrics answers
	// WriteTimeout bounds the sending of each response, from the moment its handler starts
	// (0: no deadline).
	WriteTimeout time.Duration
	// EnableLifecycle serves POST /-/reload (--web.enable-lifecycle); without it the endpoint
	// answers 403, as Prometheus's.
	EnableLifecycle bool
}

// DefaultWriteTimeout is --web.write-timeout's default: a little above Prometheus's default
// scrape timeout (10 s), whose scrapes have given up by then anyway.
const DefaultWriteTimeout = 15 * time.Second

// Metrics is what /metrics serves beside the controllers' rendered sets.
type Metrics struct {
	// Live holds the exporter's own families, encoded at each scrape; the Go, process and
	// promhttp families join it.
	Live *prometheus.Registry
	// Rendered encodes live what the rendered sets hold, for name[] filters and the protobuf
	// text forms.
	Rendered prometheus.Gatherer
	// Renderer is shared with the controllers' rendered families: renders pause for scrapes.
	Renderer *exposition.Renderer
}

// server is the endpoints over one Source.
type server struct {
	src    Source
	logger log.Logger
	sd     *sdGuard
}

// Handler serves every endpoint over src. It registers veil_sd_* (and, unless disabled, the Go,
// process and promhttp families) in m.Live; a second Handler on the same registry shares them.
func Handler(src Source, m Metrics, logger log.Logger, o HandlerOptions) http.Handler {
	s := &server{src: src, logger: logger, sd: newSDGuard(m.Live)}
	return s.handler(m, o)
}

func (s *server) handler(m Metrics, o HandlerOptions) http.Handler {
	opts := promhttp.HandlerOpts{
		// One inconsistent family must not cost the whole scrape.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            promLogger{s.logger},
		OfferedCompressions: []promhttp.Compression{promhttp.Identity, promhttp.Gzip, promhttp.Zstd},
		EnableOpenMetrics:   !o.DisableOpenMetrics,
		// As client_golang: _created lines only when asked for (a series more per counter).
		EnableOpenMetricsTextCreatedSamples: o.CreatedSamples,
	}
	// A scrape in text, OpenMetrics or protobuf writes the controllers' rendered series as they
	// are and encodes only m.Live's, the exporter's own; name[] filters and the protobuf text
	// forms encode everything. The Go, process and handler families join m.Live: one registry
	// gathered is half the garbage of two (a Gather allocates 32 KiB of channels per registry,
	// and scrapes' garbage is what makes the collector run during scrapes).
	all := prometheus.Gatherers{m.Live, m.Rendered}
	var exporter *prometheus.Registry
	if !o.DisableExporterMetrics {
		exporter = m.Live
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := exporter.Register(c); err != nil {
				if _, again := err.(prometheus.AlreadyRegisteredError); !again {
					panic(err)
				}
			}
		}
		opts.Registry = exporter // promhttp_metric_handler_errors_total
	}
	// Before promhttp.HandlerFor, which then takes this counter (and panics should it ever
	// describe it otherwise).
	errs := handlerErrors(exporter)
	metrics := exposition.Handler(exposition.HandlerOpts{
		Live:                m.Live,
		Sets:                s.src.RenderedSets,
		Fallback:            promhttp.HandlerFor(all, opts),
		Renderer:            m.Renderer,
		DisableOpenMetrics:  o.DisableOpenMetrics,
		CreatedSamples:      o.CreatedSamples,
		ErrorLog:            opts.ErrorLog,
		Errors:              errs,
		MaxRequestsInFlight: o.MaxRequests,
	})
	metrics = s.logSendOnce(metrics)
	if exporter != nil {
		metrics = promhttp.InstrumentMetricHandler(exporter, metrics)
	}
	mux := http.NewServeMux()
	mux.Handle(o.TelemetryPath, metrics)
	mux.HandleFunc("/-/healthy", s.serveHealthy)
	mux.HandleFunc("/-/ready", s.serveReady)
	mux.Handle("/-/reload", lifecycle(o.EnableLifecycle, http.HandlerFunc(s.serveReload)))
	mux.HandleFunc("GET /sd/domains", s.serveSD)
	mux.HandleFunc("GET /{$}", s.serveStatus) // GET also answers HEAD; other methods get 405
	return withWriteDeadline(browserHeaders(mux), o.WriteTimeout)
}

// lifecycle guards an endpoint that changes the daemon as Prometheus guards its /-/reload:
// POST or PUT, and only with --web.enable-lifecycle (403 otherwise). A browser's request from
// another site (a form posted by any page the operator visits) is refused too: 403.
func lifecycle(enabled bool, next http.Handler) http.Handler {
	csrf := http.NewCrossOriginProtection()
	guarded := csrf.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			w.Header().Set("Allow", "POST, PUT")
			http.Error(w, "Only POST or PUT requests allowed", http.StatusMethodNotAllowed)
			return
		}
		if !enabled {
			http.Error(w, "Lifecycle API is not enabled (--web.enable-lifecycle).", http.StatusForbidden)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// pageCSP is the Content-Security-Policy of every answer but the status page's (statusCSP):
// nothing to load, no frame to be shown in.
const pageCSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// browserHeaders sets on every answer what keeps a browser from misreading it (nosniff) or
// showing it inside another site's page (frame-ancestors, X-Frame-Options for older ones).
func browserHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", pageCSP)
		next.ServeHTTP(w, r)
	})
}

// withWriteDeadline gives every response a write deadline of timeout from now: a client that
// stops reading is dropped then, with whatever it held, rather than waited for. It is set per
// response (net/http keeps a connection's deadline across its requests otherwise).
func withWriteDeadline(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ErrNotSupported only for a writer that is not a connection's (tests' recorders);
		// the server's WriteTimeout (cmd/veil-exporter) stands behind it.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
		next.ServeHTTP(w, r)
	})
}

// handlerErrors registers promhttp_metric_handler_errors_total in reg (nil: no exporter
// metrics) for both paths: the text path counts its errors in it, and promhttp takes it as its
// own.
func handlerErrors(reg *prometheus.Registry) *prometheus.CounterVec {
	if reg == nil {
		return nil
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"})
	// Both causes from the start, as promhttp makes them on the counter it would have made.
	c.WithLabelValues("gathering")
	c.WithLabelValues("encoding")
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			return are.ExistingCollector.(*prometheus.CounterVec)
		}
		panic(err)
	}
	return c
}

// promLogger is promhttp's ErrorLog. A failed write of the response (the scraper hung up) is
// reported once per scrape by logSendOnce rather than once per metric family here.
type promLogger struct{ logger log.Logger }

func (l promLogger) Println(v ...any) {
	for _, x := range v {
		var se *sendError
		if err, ok := x.(error); ok && errors.As(err, &se) {
			se.w.countFailed()
			return
		}
	}
	level.Error(l.logger).Log("msg", "error gathering metrics", "err", fmt.Sprint(v...))
}

// logSendOnce logs one line for a scrape whose response could not be sent, with the number of
// metric families that were not; promhttp would log each family.
func (s *server) logSendOnce(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &sendWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if err, failed := sw.result(); err != nil {
			level.Warn(s.logger).Log("msg", "couldn't send the scrape response", "remote", r.RemoteAddr, "families_not_sent", failed, "err", err.err)
		}
	})
}

// sendWriter remembers the first failed write; every later write fails at once with the same
// error, which promLogger recognises.
type sendWriter struct {
	http.ResponseWriter
	mu     sync.Mutex // a compressor may write from its own goroutine
	err    *sendError
	failed int
}

type sendError struct {
	err error
	w   *sendWriter
}

func (e *sendError) Error() string { return e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

func (w *sendWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.err = &sendError{err: err, w: w}
		return n, w.err
	}
	return n, nil
}

func (w *sendWriter) countFailed() {
	w.mu.Lock()
	w.failed++
	w.mu.Unlock()
}

func (w *sendWriter) result() (*sendError, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err, w.failed
}

// serveHealthy is the liveness check: 503 with the reason when the exporter cannot recover
// without a restart (or a reload). A controller that is down is not such a reason.
func (s *server) serveHealthy(w http.ResponseWriter, r *http.Request) {
	if reason := s.src.Unhealthy(time.Now()); reason != "" {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "Healthy")
}

// serveReady: 503 with the reason until the source is ready.
func (s *server) serveReady(w http.ResponseWriter, r *http.Request) {
	if why := s.src.NotReady(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "Ready")
}

func (s *server) serveReload(w http.ResponseWriter, r *http.Request) {
	if err := s.src.Reload(); err != nil {
		http.Error(w, "reload refused, the previous configuration keeps running: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "Reloaded")
}

func (s *server) serveStatus(w http.ResponseWriter, r *http.Request) {
	st := statusOf(s.src.Status())
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // subjects end in ">"; this is JSON, not HTML
		_ = enc.Encode(st)
		return
	}
	// Rendered whole before sending, so a template error is a 500 rather than half a page.
	var buf bytes.Buffer
	if err := statusPage.Execute(&buf, statusPageData{statusData: st, Now: time.Now()}); err != nil {
		level.Error(s.logger).Log("msg", "couldn't render the status page", "err", err)
		http.Error(w, "couldn't render the status page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", statusCSP)
	_, _ = buf.WriteTo(w)
}
