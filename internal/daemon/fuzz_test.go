// Fuzz target of the HTTP handlers' query parameters, against a daemon running two simulated
// controllers: whatever the query, /sd/domains answers the http_sd list it selects (controller=,
// port=) or 400 for a port that is none or parameters beyond their bounds, and the status page answers JSON for format=json and a
// whole HTML page otherwise; never a 5xx.

package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func FuzzHandlerQuery(f *testing.F) {
	h, all := fuzzDaemon(f)
	for _, q := range []string{
		"", "controller=alpha", "controller=beta", "controller=gamma", "controller=", "controller=alpha&controller=beta",
		"port=9100&controller=beta", "port=1", "port=65535", "port=0", "port=65536", "port=http", "port=", "port",
		"port=+80", "port=0080", "port=-1", "port=9100&port=x", "port=%39%31%30%30", "port=1e3", "port=99999999999999999999",
		"format=json", "format=JSON", "format=", "format=html", "format=json&format=html", "format=%6Aso%6E",
		"format=<script>alert(1)</script>", "format=json;port=1", "%zz", "port=%", "a=1&&b", "controller=al%00pha",
		"controller=alpha&port=9100&format=json", strings.Repeat("tag=a&", 65), "tag=" + strings.Repeat("x", 257), // beyond web's 64 values of 256 bytes
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, _ := url.ParseQuery(query) // the parameters as the handlers read them: bad pairs dropped

		code, ctype, body := serveQuery(h, "/sd/domains", query)
		port, portOK := sdPort, true
		if q.Has("port") {
			n, err := strconv.Atoi(q.Get("port"))
			port, portOK = strconv.Itoa(n), err == nil && n >= 1 && n <= 65535
		}
		switch {
		case beyondSDBounds(q):
			if code != http.StatusBadRequest {
				t.Fatalf("/sd/domains?%s beyond the bounds: %d %q, want 400", query, code, body)
			}
		case !portOK:
			if code != http.StatusBadRequest || !strings.HasPrefix(ctype, "text/plain") {
				t.Fatalf("/sd/domains?%s with port %q: %d %s %q, want 400 text", query, q.Get("port"), code, ctype, body)
			}
		case code != http.StatusOK || ctype != "application/json":
			t.Fatalf("/sd/domains?%s: %d %s %q, want 200 JSON", query, code, ctype, body)
		default:
			var got []sdGroup
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("/sd/domains?%s: not http_sd JSON: %v\n%s", query, err, body)
			}
			if q.Has("tag") || q.Has("os_id") || q.Has("node") || q.Has("family") {
				return // filters this target does not model (TestSDDomainsFilters*)
			}
			want := []sdGroup{}
			for _, g := range all {
				if !q.Has("controller") || g.Labels["__meta_veil_controller"] == q.Get("controller") {
					want = append(want, g)
				}
			}
			if diff := diffSD(got, withPort(want, port)); diff != "" {
				t.Fatalf("/sd/domains?%s: %s", query, diff)
			}
		}

		code, ctype, body = serveQuery(h, "/", query)
		switch {
		case code != http.StatusOK:
			t.Fatalf("/?%s: %d %q, want 200", query, code, body)
		case q.Get("format") == "json":
			var s struct{ Controllers []json.RawMessage }
			if err := json.Unmarshal(body, &s); ctype != "application/json" || err != nil || len(s.Controllers) != 2 {
				t.Fatalf("/?%s: %s, %v, %d controllers, want JSON of both:\n%s", query, ctype, err, len(s.Controllers), body)
			}
		case ctype != "text/html; charset=utf-8" || !bytes.HasPrefix(body, []byte("<!DOCTYPE html>")) ||
			!bytes.HasSuffix(bytes.TrimSpace(body), []byte("</html>")):
			t.Fatalf("/?%s: %s, want a whole HTML page:\n%.300s", query, ctype, body)
		}
	})
}

// beyondSDBounds says whether q has more than 64 values or a name or value longer than 256
// bytes: what /sd/domains refuses with 400 before it looks at a VM.
func beyondSDBounds(q url.Values) bool {
	n := 0
	for k, vs := range q {
		n += len(vs)
		if len(k) > 256 {
			return true
		}
		for _, v := range vs {
			if len(v) > 256 {
				return true
			}
		}
	}
	return n > 64
}

// sdPort is sd.port in fuzzDaemon's config.
const sdPort = "9182"

// fuzzDaemon runs a daemon on two simulated controllers (inventory only, refreshed once) until it
// is ready, and returns its handler and what /sd/domains lists with no query: guests of both.
func fuzzDaemon(f *testing.F) (http.Handler, []sdGroup) {
	dir := f.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(testutil.SecretToken), 0o600); err != nil {
		f.Fatal(err)
	}
	simA := veiltest.New(veiltest.Options{Seed: 21, Token: testutil.SecretToken, VMs: 8})
	f.Cleanup(simA.Close)
	simB := veiltest.New(veiltest.Options{Seed: 22, Token: testutil.SecretToken, VMs: 8})
	f.Cleanup(simB.Close)
	cfgFile := filepath.Join(dir, "veil.yaml")
	body := "controllers:\n" + testutil.ControllerYAML("beta", simB.URL, tok) + testutil.ControllerYAML("alpha", simA.URL, tok) +
		"collect:\n  interval: 1h\nguest:\n  enabled: false\nevents:\n  enabled: false\nsd:\n  port: " + sdPort + "\n"
	if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
		f.Fatal(err)
	}
	cfg, err := config.Load(cfgFile)
	if err != nil {
		f.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigFile: cfgFile, Logger: log.NewNopLogger(), Version: "test"})
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = d.Run(context.Background()) }()
	f.Cleanup(d.Stop)
	h := d.Handler(HandlerOptions{TelemetryPath: "/metrics"})
	testutil.Eventually(f, 15*time.Second, func() bool { code, _, _ := serveQuery(h, "/-/ready", ""); return code == http.StatusOK }, "ready")

	code, _, sd := serveQuery(h, "/sd/domains", "")
	var all []sdGroup
	if err := json.Unmarshal(sd, &all); code != http.StatusOK || err != nil {
		f.Fatalf("/sd/domains: %d %v %s", code, err, sd)
	}
	per := map[string]int{}
	for _, g := range all {
		per[g.Labels["__meta_veil_controller"]]++
	}
	if per["alpha"] == 0 || per["beta"] == 0 {
		f.Fatalf("/sd/domains must list guests of both controllers: %v", per)
	}
	return h, all
}

// serve sends GET path?query to h in-process and returns the status, content type and body.
func serveQuery(h http.Handler, path, query string) (int, string, []byte) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.URL.RawQuery = query
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
}
