// Tests of the HTTP client New builds from Config's TLS settings.

package veil_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestTLSSettings: a controller with a private CA is trusted through CAFile or not checked with
// InsecureSkipVerify, refused otherwise; an unreadable or empty CAFile fails New.
func TestTLSSettings(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"version": "6.1.3"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("no certificate here"), 0o600)
	tests := []struct {
		name       string
		caFile     string
		insecure   bool
		wantNewErr string // "" when New succeeds
		wantOK     bool   // the request is answered
	}{
		{"private CA trusted through ca_file", ca, false, "", true},
		{"not checked when insecure", "", true, "", true},
		{"refused with the system's roots", "", false, "", false},
		{"missing ca_file", filepath.Join(dir, "missing.pem"), false, "couldn't read ca_file", false},
		{"ca_file without a certificate", notPEM, false, "holds no PEM certificate", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", CAFile: tt.caFile, InsecureSkipVerify: tt.insecure, MaxRetries: -1})
			if tt.wantNewErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantNewErr) {
					t.Fatalf("New: %v, want %q", err, tt.wantNewErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.ControllerVersion(context.Background())
			if ok := err == nil && v == "6.1.3"; ok != tt.wantOK {
				t.Errorf("ControllerVersion = %q, %v; want answered %v", v, err, tt.wantOK)
			}
		})
	}
}
