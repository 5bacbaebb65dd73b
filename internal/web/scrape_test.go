// Tests of /metrics: parallel scrapes at most --web.max-requests, one log line for a scraper
// that hung up, compression.

package web

import (
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// heldCollector holds every scrape in Collect until released, then emits its metrics.
type heldCollector struct {
	desc    *prometheus.Desc
	entered chan struct{}
	release chan struct{}
	metrics []prometheus.Metric
}

func newHeldCollector() *heldCollector {
	return &heldCollector{
		desc:    prometheus.NewDesc("test_held", "A scrape held in Collect.", nil, nil),
		entered: make(chan struct{}, 100),
		release: make(chan struct{}),
	}
}

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	c.entered <- struct{}{}
	<-c.release
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
	for _, m := range c.metrics {
		ch <- m
	}
}

func (c *heldCollector) waitEntered(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-c.entered:
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d scrapes reached Collect", i, n)
		}
	}
}

// TestMaxRequests: with --web.max-requests N (the flag: cmd/veil-exporter's TestMaxRequestsFlag) the N+1th parallel scrape gets 503 while N are
// held; with 0 there is no limit.
func TestMaxRequests(t *testing.T) {
	tests := []struct {
		name     string
		limit    int
		held     int // scrapes held in Collect at once
		wantLast int // status of one more scrape while they are held
	}{
		{"over the limit", 2, 2, http.StatusServiceUnavailable},
		{"no limit", 0, 3, 0}, // the extra scrape is held too: counted among held
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, reg := newHandler(&fakeSource{}, HandlerOptions{MaxRequests: tt.limit})
			held := newHeldCollector()
			reg.MustRegister(held)
			url := newTestServer(t, h) + "/metrics"
			var wg sync.WaitGroup
			codes := make(chan int, tt.held)
			for i := 0; i < tt.held; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := http.Get(url)
					if err != nil {
						codes <- -1
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes <- resp.StatusCode
				}()
			}
			held.waitEntered(t, tt.held) // with no limit, all of them at once
			if tt.wantLast != 0 {
				resp, err := http.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantLast || !strings.Contains(string(body), fmt.Sprintf("Limit of concurrent requests reached (%d)", tt.limit)) {
					t.Errorf("scrape over the limit = %d %q, want %d", resp.StatusCode, body, tt.wantLast)
				}
			}
			close(held.release)
			wg.Wait()
			close(codes)
			for c := range codes {
				if c != 200 {
					t.Errorf("a held scrape ended with %d", c)
				}
			}
		})
	}
}

// TestScrapeHangUpLogsOnce: a scraper that hangs up before the response is sent costs one log
// line per scrape, not one per metric family, whatever the encoding.
func TestScrapeHangUpLogsOnce(t *testing.T) {
	// 40 families of 25 series with 10 KiB of random label (random, so that compressed too the
	// response is far larger than the socket buffers: writes fail once the client is gone).
	var metrics []prometheus.Metric
	val := make([]byte, 5<<10)
	for f := 0; f < 40; f++ {
		desc := prometheus.NewDesc(fmt.Sprintf("test_big_%d", f), "Big.", []string{"v"}, nil)
		for s := 0; s < 25; s++ {
			rand.Read(val)
			metrics = append(metrics, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, 1, hex.EncodeToString(val)))
		}
	}
	for _, enc := range []string{"identity", "gzip", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			logs := &testutil.SyncBuffer{}
			reg := prometheus.NewRegistry()
			held := newHeldCollector()
			held.metrics = metrics
			reg.MustRegister(held)
			ms := Metrics{Live: reg, Rendered: prometheus.NewRegistry(), Renderer: exposition.NewRenderer()}
			h := Handler(&fakeSource{}, ms, log.NewLogfmtLogger(logs), HandlerOptions{TelemetryPath: "/metrics"})
			served := make(chan struct{})
			srv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(served)
				h.ServeHTTP(w, r)
			}))
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: test\r\nAccept-Encoding: %s\r\n\r\n", enc)
			held.waitEntered(t, 1)
			conn.Close() // hung up before a byte of the response
			close(held.release)
			select {
			case <-served:
			case <-time.After(30 * time.Second):
				t.Fatal("the scrape did not end")
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if l != "" {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], `msg="couldn't send the scrape response"`) {
				t.Fatalf("want one line for the failed scrape, got %d:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			// Several families failed: promhttp alone would have logged each.
			m := regexp.MustCompile(`families_not_sent=(\d+) `).FindStringSubmatch(lines[0])
			if m == nil {
				t.Fatalf("no families_not_sent: %s", lines[0])
			}
			if n, _ := strconv.Atoi(m[1]); n < 2 {
				t.Errorf("families_not_sent < 2: %s", lines[0])
			}
		})
	}
}

// TestScrapeCompression: zstd and gzip are offered to scrapers; identity when asked for none.
func TestScrapeCompression(t *testing.T) {
	h, _ := newHandler(&fakeSource{}, HandlerOptions{})
	srv := newTestServer(t, h)
	tests := []struct {
		accept, want string
		decode       func(io.Reader) (io.Reader, error)
	}{
		{"zstd", "zstd", func(r io.Reader) (io.Reader, error) { return zstd.NewReader(r) }},
		{"gzip", "gzip", func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
		{"zstd;q=0.5, gzip", "gzip", func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
		{"identity", "", func(r io.Reader) (io.Reader, error) { return r, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv+"/metrics", nil)
			req.Header.Set("Accept-Encoding", tt.accept) // set by hand: the transport then does not decode
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("Content-Encoding"); got != tt.want {
				t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want %q", tt.accept, got, tt.want)
			}
			r, err := tt.decode(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("decoding %s: %v", tt.want, err)
			}
			if !strings.Contains(string(body), "veil_sd_requests_refused_total{") {
				t.Errorf("decoded body lacks veil_sd_requests_refused_total:\n%.500s", body)
			}
		})
	}
}
