// The lifecycle endpoint's guard and the headers that keep a browser from misreading an answer.

package web

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLifecycleAndBrowserHeaders: /-/reload as Prometheus's (POST or PUT, 403 without
// --web.enable-lifecycle, 405 for other methods), a browser's cross-site POST refused even
// with it, and every answer carries nosniff, a CSP with frame-ancestors 'none' and
// X-Frame-Options.
func TestLifecycleAndBrowserHeaders(t *testing.T) {
	refuse := &fakeSource{reload: func() error { return errors.New("couldn't read config") }}
	hOff, _ := newHandler(refuse, HandlerOptions{})
	off := newTestServer(t, hOff)
	hOn, _ := newHandler(refuse, HandlerOptions{EnableLifecycle: true})
	on := newTestServer(t, hOn)

	tests := []struct {
		name     string
		base     string
		method   string
		header   [2]string
		wantCode int
		wantBody string
	}{
		{"disabled POST", off, http.MethodPost, [2]string{}, http.StatusForbidden, "Lifecycle API is not enabled"},
		{"disabled PUT", off, http.MethodPut, [2]string{}, http.StatusForbidden, "Lifecycle API is not enabled"},
		{"disabled GET", off, http.MethodGet, [2]string{}, http.StatusMethodNotAllowed, "Only POST or PUT"},
		{"enabled GET", on, http.MethodGet, [2]string{}, http.StatusMethodNotAllowed, "Only POST or PUT"},
		{"enabled DELETE", on, http.MethodDelete, [2]string{}, http.StatusMethodNotAllowed, "Only POST or PUT"},
		// The source refuses every reload: a refusal is what reaching it means.
		{"enabled POST reloads", on, http.MethodPost, [2]string{}, http.StatusInternalServerError, "reload refused"},
		{"enabled PUT reloads", on, http.MethodPut, [2]string{}, http.StatusInternalServerError, "reload refused"},
		{"enabled same-origin POST reloads", on, http.MethodPost, [2]string{"Sec-Fetch-Site", "same-origin"}, http.StatusInternalServerError, "reload refused"},
		{"enabled cross-site POST refused", on, http.MethodPost, [2]string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden, ""},
		{"enabled foreign Origin refused", on, http.MethodPost, [2]string{"Origin", "https://evil.example"}, http.StatusForbidden, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.base+"/-/reload", nil)
			if tt.header[0] != "" {
				req.Header.Set(tt.header[0], tt.header[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantBody) {
				t.Errorf("%s /-/reload = %d %q, want %d containing %q", tt.method, resp.StatusCode, b, tt.wantCode, tt.wantBody)
			}
			if resp.StatusCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "POST, PUT" {
				t.Errorf("Allow = %q, want POST, PUT", resp.Header.Get("Allow"))
			}
		})
	}

	for _, path := range []string{"/", "/?format=json", "/metrics", "/-/healthy", "/-/ready", "/sd/domains", "/-/reload", "/nope"} {
		resp, err := http.Get(off + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s (%d): nosniff %q, X-Frame-Options %q, CSP %q", path, resp.StatusCode, h.Get("X-Content-Type-Options"), h.Get("X-Frame-Options"), h.Get("Content-Security-Policy"))
		}
	}
}

// TestStatusPageCSPAllowsItsStyle: the status page's CSP names the hash of the <style> it
// sends (a changed stylesheet would otherwise go unapplied), and the page has no other inline
// style or script.
func TestStatusPageCSPAllowsItsStyle(t *testing.T) {
	h, _ := newHandler(&fakeSource{}, HandlerOptions{})
	base := newTestServer(t, h)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	csp := resp.Header.Get("Content-Security-Policy")
	if want := "style-src '" + styleHash(page) + "'"; !strings.Contains(csp, want) {
		t.Errorf("CSP %q lacks %q, the hash of the <style> sent", csp, want)
	}
	for _, inline := range []string{"<script", " style=", " onclick=", " onload="} {
		if strings.Contains(page, inline) {
			t.Errorf("the status page has %q, which its CSP blocks", inline)
		}
	}
}
