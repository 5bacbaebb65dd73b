package veiltest

// This file holds the tests of the route table: the docs page lists every route and needs no
// token, and every route of the table is served (never a 404 or a 405 from the router).

import (
	"html"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestDocsPageListsEveryRouteWithoutToken(t *testing.T) {
	s, _ := newSim(t, Options{})
	resp, err := http.Get(s.URL + "/api/docs/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/api/docs/ without a token: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	page := html.UnescapeString(string(b))
	for _, rt := range append(append([]route{}, apiRoutes...), controlRoutes...) {
		if want := strings.TrimSuffix(rt.pattern, "{$}"); !strings.Contains(page, want) {
			t.Errorf("docs page does not list %q", want)
		}
	}
	// The API itself still needs the token.
	resp, err = http.Get(s.URL + "/api/nodes/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/api/nodes/ without a token: %d, want 401", resp.StatusCode)
	}
}

// TestEveryRouteIsServed sends each route's method to its path (ids of real objects) and checks
// the router neither misses it (404 with "URL is not found") nor refuses its method (405).
func TestEveryRouteIsServed(t *testing.T) {
	s, c := newSim(t, Options{})
	ids := map[string]string{
		"/api/nodes/{id}/": s.NodeIDs()[0], "/api/clusters/{id}/": s.ClusterIDs()[0],
		"/api/data-pools/{id}/": s.DatapoolIDs()[0], "/api/domains/{id}/": s.DomainIDs()[0],
		"/_sim/nodes/{id}/": s.NodeIDs()[0], "/_sim/domains/{id}/": s.DomainIDs()[0],
	}
	for _, rt := range append(append([]route{}, apiRoutes...), controlRoutes...) {
		method, path, _ := strings.Cut(strings.TrimSuffix(rt.pattern, "{$}"), " ")
		for prefix, id := range ids {
			if strings.HasPrefix(path, prefix) {
				path = strings.Replace(path, "{id}", id, 1)
			}
		}
		path = strings.NewReplacer("{id}", "00000000-0000-4000-8000-000000000000", "{action}", "power_on").Replace(path)
		st, b := c.do(method, path, map[string]any{})
		if st == http.StatusMethodNotAllowed || st == http.StatusNotFound && strings.Contains(string(b), "URL is not found") ||
			st == http.StatusNotFound && strings.Contains(string(b), "Unknown control endpoint") {
			t.Errorf("%s %s (route %q): %d %s", method, path, rt.pattern, st, b)
		}
	}
}
