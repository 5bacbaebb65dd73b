package veil_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// errorCase is a call that fails, and what its error must say.
type errorCase struct {
	name   string
	mod    func(*veil.Config)
	faults []veiltest.Fault
	call   func(c *veil.Client) error
	is     error  // errors.Is target, or nil
	status int    // *APIError status, 0 = not an APIError
	want   string // substring of Error()
}

// errorCases are TestErrorClasses's rows: one of each class of failure.
func errorCases(ctx context.Context, sim *veiltest.Server, domainID string, off veiltest.DomainInfo) []errorCase {
	return []errorCase{
		{
			name: "401 wrong token is ErrUnauthorized",
			mod:  func(c *veil.Config) { c.Token = "jwt wrong-secret" },
			call: func(c *veil.Client) error { _, err := c.Nodes(ctx); return err },
			is:   veil.ErrUnauthorized, status: 401, want: "401 unauthorized",
		},
		{
			name: "403 read-only token on a guest command is ErrForbidden",
			mod:  func(c *veil.Config) { c.Token = "read-only-secret" },
			call: func(c *veil.Client) error { _, err := c.GuestPing(ctx, domainID, time.Second); return err },
			is:   veil.ErrForbidden, status: 403, want: "403 forbidden",
		},
		{
			name: "404 unknown id is ErrNotFound with the code",
			call: func(c *veil.Client) error {
				_, err := c.Domain(ctx, "00000000-0000-4000-8000-000000000000")
				return err
			},
			is: veil.ErrNotFound, status: 404, want: "GET /api/domains/{id}/: 404 not found: Virtual machine is not found. (code 50004)",
		},
		{
			name: "405 wrong method",
			call: func(c *veil.Client) error {
				_, err := veil.ListPage[veil.Domain](ctx, c, veil.PageRequest{Path: "/api/domains/" + domainID + "/start/", Limit: 10})
				return err
			},
			status: 405, want: "405 method not allowed",
		},
		{
			name: "400 field error names the field",
			call: func(c *veil.Client) error {
				_, err := c.GuestCommand(ctx, off.ID, "guest-get-no-such-command", nil, time.Second)
				return err
			},
			status: 400, want: "400 bad request: qemu_cmd: ",
		},
		{
			name:   "HTML error page gives status and a text snippet",
			faults: []veiltest.Fault{{Path: "/api/nodes/", Kind: "html"}},
			call:   func(c *veil.Client) error { _, err := c.Nodes(ctx); return err },
			status: 502, want: "502 bad gateway: non-JSON response:",
		},
		{
			name:   "truncated JSON names the endpoint",
			faults: []veiltest.Fault{{Path: "/api/domains/", Kind: "truncated"}},
			call:   func(c *veil.Client) error { _, err := c.Domains(ctx, nil); return err },
			want:   "decoding GET /api/domains/ (offset 0): malformed JSON",
		},
		{
			name:   "wrong types name the endpoint and the field",
			faults: []veiltest.Fault{{Path: "/api/nodes/*", Kind: "wrong_types"}},
			call:   func(c *veil.Client) error { _, err := c.Node(ctx, sim.NodeIDs()[0]); return err },
			want:   "decoding GET /api/nodes/{id}/: field",
		},
		{
			name: "response over MaxResponseBytes is ErrTooLarge",
			mod:  func(c *veil.Config) { c.MaxResponseBytes = 2000 },
			call: func(c *veil.Client) error { _, err := c.Domains(ctx, nil); return err },
			is:   veil.ErrTooLarge, want: "response too large",
		},
	}
}

func TestErrorClasses(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 5, VMs: 50, ReadOnlyToken: "read-only-secret"})
	ctx := context.Background()
	domainID := sim.DomainIDs()[0]
	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return d.PowerState == veil.PowerOff && !d.Template })

	for _, tc := range errorCases(ctx, sim, domainID, off) {
		t.Run(tc.name, func(t *testing.T) {
			sim.SetFaults(tc.faults...)
			defer sim.ClearFaults()
			c := newClient(t, sim, func(cfg *veil.Config) {
				cfg.MaxRetries = -1
				if tc.mod != nil {
					tc.mod(cfg)
				}
			})
			err := tc.call(c)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.is)
			}
			for _, other := range []error{veil.ErrUnauthorized, veil.ErrForbidden, veil.ErrNotFound, veil.ErrTooLarge} {
				if other != tc.is && errors.Is(err, other) {
					t.Errorf("errors.Is(%v, %v) = true", err, other)
				}
			}
			var ae *veil.APIError
			if errors.As(err, &ae) != (tc.status != 0) || (ae != nil && ae.StatusCode != tc.status) {
				t.Errorf("APIError = %+v, want status %d", ae, tc.status)
			}
			for _, secret := range []string{sim.Token, "wrong-secret", "read-only-secret"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains a token", err)
				}
			}
		})
	}
}

func TestNonJSONErrorSnippetIsShortPlainText(t *testing.T) {
	page := "<html><head><title>502 Bad Gateway</title><style>body{color:red}</style></head><body>" +
		"<center><h1>502 Bad Gateway</h1></center><hr><center>nginx/1.18.0 &amp; friends " +
		strings.Repeat("padding text ", 40) + "</center></body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t0ken-value", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Nodes(context.Background())
	var ae *veil.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an APIError", err)
	}
	if ae.StatusCode != 502 || !strings.HasPrefix(ae.Snippet, "502 Bad Gateway 502 Bad Gateway nginx/1.18.0 & friends") {
		t.Errorf("snippet %q", ae.Snippet)
	}
	if n := len([]rune(ae.Snippet)); n > 120 || strings.ContainsAny(ae.Snippet, "<>") || strings.Contains(ae.Snippet, "color") {
		t.Errorf("snippet of %d chars is not short plain text: %q", n, ae.Snippet)
	}
}

func TestRetries(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 6, VMs: 20})
	ctx := context.Background()
	ready := findDomain(t, sim, guestReady)

	for _, tc := range []struct {
		name     string
		fault    veiltest.Fault
		call     func(c *veil.Client) error
		method   string
		path     string
		wantErr  bool
		attempts int
	}{
		{"GET retried on 500", veiltest.Fault{Path: "/api/nodes/", Kind: "status", Status: 500, Count: 2},
			func(c *veil.Client) error { _, err := c.Nodes(ctx); return err }, "GET", "/api/nodes/", false, 3},
		{"GET retried on 503", veiltest.Fault{Path: "/api/clusters/", Kind: "status", Status: 503, Count: 1},
			func(c *veil.Client) error { _, err := c.Clusters(ctx); return err }, "GET", "/api/clusters/", false, 2},
		{"GET retried on 418", veiltest.Fault{Path: "/api/data-pools/", Kind: "status", Status: 418, Count: 3},
			func(c *veil.Client) error { _, err := c.Datapools(ctx); return err }, "GET", "/api/data-pools/", false, 4},
		{"GET retried on connection reset", veiltest.Fault{Path: "/api/tasks/", Kind: "reset", Count: 1},
			func(c *veil.Client) error { _, err := c.Tasks(ctx, nil); return err }, "GET", "/api/tasks/", false, 2},
		{"GET gives up after MaxRetries", veiltest.Fault{Path: "/api/nodes/", Kind: "status", Status: 500},
			func(c *veil.Client) error { _, err := c.Nodes(ctx); return err }, "GET", "/api/nodes/", true, 4},
		{"GET not retried on 404", veiltest.Fault{Path: "/api/nodes/", Kind: "status", Status: 404},
			func(c *veil.Client) error { _, err := c.Nodes(ctx); return err }, "GET", "/api/nodes/", true, 1},
		{"guest-command POST without key never retried", veiltest.Fault{Path: "/api/domains/*/guest-command/", Kind: "status", Status: 503},
			func(c *veil.Client) error { _, err := c.GuestPing(ctx, ready.ID, time.Second); return err }, "POST", "/api/domains/" + ready.ID + "/guest-command", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim.SetFaults(tc.fault)
			defer sim.ClearFaults()
			sim.ResetRequests()
			c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxRetries = 3 })
			err := tc.call(c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			reqs := requestsTo(sim, tc.method, tc.path)
			if len(reqs) != tc.attempts {
				t.Fatalf("%d requests to %s %s, want %d: %+v", len(reqs), tc.method, tc.path, tc.attempts, reqs)
			}
		})
	}
}

func TestTokenFileRotation(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 7, Token: "new-secret"})
	file := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("jwt old-secret\n")
	c, err := veil.New(veil.Config{URL: sim.URL, TokenFile: file, RetryBaseDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The file still holds the old token: one re-read on 401, then the error.
	sim.ResetRequests()
	_, err = c.Nodes(ctx)
	if !errors.Is(err, veil.ErrUnauthorized) || strings.Contains(err.Error(), "old-secret") {
		t.Fatalf("with old token: %v", err)
	}
	if n := len(requestsTo(sim, "GET", "/api/nodes/")); n != 1 {
		t.Errorf("%d requests with an unchanged token, want 1", n)
	}
	// The file rotates: the next 401 re-reads it and the request succeeds.
	write("  new-secret \n")
	sim.ResetRequests()
	if _, err := c.Nodes(ctx); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if n := len(requestsTo(sim, "GET", "/api/nodes/")); n != 2 {
		t.Errorf("%d requests, want 401 then 200", n)
	}
	// ReloadToken re-reads explicitly.
	write("JWT old-secret")
	if err := c.ReloadToken(); err != nil {
		t.Fatal(err)
	}
	write("jwt new-secret")
	if _, err := c.Nodes(ctx); err != nil {
		t.Fatalf("after ReloadToken and rotation back: %v", err)
	}
}

func TestTokenPrefixForms(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 8, Token: "abc123"})
	for _, tok := range []string{"abc123", "jwt abc123", "JWT abc123", " jwt  abc123\n", "abc123\r\n"} {
		c := newClient(t, sim, func(cfg *veil.Config) { cfg.Token = tok })
		if _, err := c.Clusters(context.Background()); err != nil {
			t.Errorf("token %q: %v", tok, err)
		}
	}
}

func TestObserverSeesEveryAttempt(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 16})
	type call struct {
		endpoint string
		code     int
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	c := newClient(t, sim, func(cfg *veil.Config) {
		cfg.Observer = func(endpoint string, code int, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{endpoint, code})
		}
	})
	sim.SetFaults(veiltest.Fault{Path: "/api/clusters/", Kind: "reset", Count: 1},
		veiltest.Fault{Path: "/api/data-pools/", Kind: "status", Status: 429, Count: 1})
	ctx := context.Background()
	if _, err := c.Clusters(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Datapools(ctx); err != nil {
		t.Fatal(err)
	}
	_, _ = c.GuestPing(ctx, "no-such-vm", time.Second)
	want := []call{{"/api/clusters/", 0}, {"/api/clusters/", 200}, {"/api/data-pools/", 429},
		{"/api/data-pools/", 200}, {"/api/domains/{id}/guest-command/", 404}}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(calls, want) {
		t.Fatalf("observer saw %v, want %v", calls, want)
	}
}
