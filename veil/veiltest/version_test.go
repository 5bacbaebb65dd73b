package veiltest

import (
	"net/http"
	"strings"
	"testing"
)

// TestControllerVersionEndpoint: GET /api/controllers/base-version/ answers {"version"} with the
// token, follows Options, SetControllerVersion and the control API, and is a 404 error body on a
// controller older than the endpoint.
func TestControllerVersionEndpoint(t *testing.T) {
	s, c := newSim(t, Options{})
	if v := c.json("GET", "/api/controllers/base-version/", nil, 200); v["version"] != DefaultControllerVersion {
		t.Errorf("default version %v, want %s", v["version"], DefaultControllerVersion)
	}
	resp, err := http.Get(s.URL + "/api/controllers/base-version/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}

	s.SetControllerVersion("6.5.2")
	if v := c.json("GET", "/api/controllers/base-version/", nil, 200); v["version"] != "6.5.2" {
		t.Errorf("after SetControllerVersion: %v, want 6.5.2", v["version"])
	}
	if st, b := c.do("POST", "/_sim/controller_version", map[string]string{"version": NoControllerVersion}); st != 200 {
		t.Fatalf("control API: %d %s", st, b)
	}
	st, b := c.do("GET", "/api/controllers/base-version/", nil)
	if st != http.StatusNotFound || !strings.Contains(string(b), "50004") {
		t.Errorf("an older controller answers %d %s, want a 404 with code 50004", st, b)
	}

	_, c = newSim(t, Options{ControllerVersion: "5.4.1"})
	if v := c.json("GET", "/api/controllers/base-version/", nil, 200); v["version"] != "5.4.1" {
		t.Errorf("Options.ControllerVersion: %v, want 5.4.1", v["version"])
	}
}
