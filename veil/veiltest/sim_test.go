package veiltest

// This file holds the raw-HTTP client the simulator's tests share, and the tests of the protocol
// itself: paging, authentication, error bodies, wire fields, the seed and a large inventory.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func newClient(t *testing.T, s *Server) *client {
	return &client{t: t, base: s.URL, token: s.Token}
}

func (c *client) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "jwt "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// json does a request, checks the status and decodes the body.
func (c *client) json(method, path string, body any, want int) map[string]any {
	c.t.Helper()
	st, b := c.do(method, path, body)
	if st != want {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, st, want, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		c.t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, path, err, b)
	}
	return v
}

// errorOf checks an error body ({"errors":[...]}) and returns its first element.
func errorOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v struct {
		Errors []map[string]any `json:"errors"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Errors) == 0 {
		t.Fatalf("not an error body: %s", b)
	}
	e := v.Errors[0]
	key, _ := e["msg_key"].(string)
	if _, ok := e["code"].(string); !ok || key == "" {
		t.Fatalf("error without code or msg_key: %s", b)
	}
	if msg, _ := e[key].(string); msg == "" {
		t.Fatalf("error has no message under msg_key %q: %s", key, b)
	}
	return e
}

func results(t *testing.T, v map[string]any) []map[string]any {
	t.Helper()
	rs, ok := v["results"].([]any)
	if !ok {
		t.Fatalf("no results array in %v", v)
	}
	out := make([]map[string]any, len(rs))
	for i, r := range rs {
		out[i] = r.(map[string]any)
	}
	return out
}

func newSim(t *testing.T, o Options) (*Server, *client) {
	t.Helper()
	s := New(o)
	t.Cleanup(s.Close)
	return s, newClient(t, s)
}

func TestPagingFollowsDRFEnvelopeAndSpecLimits(t *testing.T) {
	for _, n := range []int{0, 1, 100, 101} {
		t.Run(fmt.Sprintf("%d_events", n), func(t *testing.T) {
			_, c := newSim(t, Options{InitialEvents: n, VMs: -1, InitialTasks: -1})
			v := c.json("GET", "/api/events/", nil, 200)
			if got := v["count"].(float64); int(got) != n {
				t.Fatalf("count %v, want %d", got, n)
			}
			rs := results(t, v)
			if len(rs) != min(n, 100) {
				t.Fatalf("%d results, want %d", len(rs), min(n, 100))
			}
			if (v["next"] != nil) != (n > 100) {
				t.Fatalf("next = %v with %d items", v["next"], n)
			}
			if v["previous"] != nil {
				t.Fatalf("previous on the first page: %v", v["previous"])
			}
			if n > 100 {
				next := v["next"].(string)
				if !strings.HasPrefix(next, c.base+"/api/events/") || !strings.Contains(next, "offset=100") {
					t.Fatalf("next is not an absolute URL to offset 100: %s", next)
				}
				v2 := c.json("GET", strings.TrimPrefix(next, c.base), nil, 200)
				if len(results(t, v2)) != 1 || v2["next"] != nil || v2["previous"] == nil {
					t.Fatalf("second page wrong: %v", v2)
				}
			}
		})
	}

	_, c := newSim(t, Options{VMs: 150})
	for _, tc := range []struct {
		name  string
		query string
		want  int // results, or -1 for a 400
		field string
	}{
		{"limit above 100 is clamped", "limit=500", 100, ""},
		{"default limit is 100", "", 100, ""},
		{"limit and offset page", "limit=20&offset=140", 10, ""},
		{"offset beyond count is empty", "offset=1000", 0, ""},
		{"limit zero is an empty page", "limit=0", 0, ""},
		{"negative limit is a field error", "limit=-1", -1, "limit"},
		{"non-integer limit is a field error", "limit=ten", -1, "limit"},
		{"negative offset is a field error", "offset=-5", -1, "offset"},
		{"fractional offset is a field error", "offset=1.5", -1, "offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do("GET", "/api/domains/?"+tc.query, nil)
			if tc.want < 0 {
				if st != 400 {
					t.Fatalf("status %d, want 400: %s", st, b)
				}
				e := errorOf(t, b)
				if e["code"] != "invalid" || e["msg_key"] != tc.field {
					t.Fatalf("error %v, want code invalid for %s", e, tc.field)
				}
				return
			}
			var v map[string]any
			if st != 200 || json.Unmarshal(b, &v) != nil {
				t.Fatalf("status %d: %s", st, b)
			}
			if v["count"].(float64) != 150 || len(results(t, v)) != tc.want {
				t.Fatalf("count %v, %d results, want 150 and %d", v["count"], len(results(t, v)), tc.want)
			}
		})
	}
}

func TestAuthNeedsJWTTokenAndReadOnlyCannotWrite(t *testing.T) {
	s, _ := newSim(t, Options{ReadOnlyToken: "ro"})
	vm := s.DomainIDs()[0]
	for _, tc := range []struct {
		name, header, method, path string
		want                       int
	}{
		{"no header", "", "GET", "/api/nodes/", 401},
		{"wrong token", "jwt nope", "GET", "/api/nodes/", 401},
		{"bearer scheme", "Bearer sim-token", "GET", "/api/nodes/", 401},
		{"bare token", "sim-token", "GET", "/api/nodes/", 401},
		{"good token", "jwt sim-token", "GET", "/api/nodes/", 200},
		{"read-only token reads", "jwt ro", "GET", "/api/domains/", 200},
		{"read-only token cannot start", "jwt ro", "POST", "/api/domains/" + vm + "/start/?async=1", 403},
		{"read-only token cannot put", "jwt ro", "PUT", "/api/domains/" + vm + "/template/", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader("{}"))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, b)
			}
			if tc.want >= 400 {
				if e := errorOf(t, b); e["code"] != fmt.Sprint(tc.want) {
					t.Fatalf("code %v, want %d", e["code"], tc.want)
				}
			}
		})
	}
}

func TestNotFoundAndMethodNotAllowedHaveErrorBodies(t *testing.T) {
	s, c := newSim(t, Options{})
	node := s.NodeIDs()[0]
	for _, tc := range []struct {
		name, method, path string
		want               int
		code               string
	}{
		{"unknown path", "GET", "/api/nothing/", 404, "50004"},
		{"unknown domain", "GET", "/api/domains/00000000-0000-4000-8000-000000000000/", 404, "50004"},
		{"unknown task", "GET", "/api/tasks/00000000-0000-4000-8000-000000000000/", 404, "50004"},
		{"unknown event", "GET", "/api/events/x/", 404, "50004"},
		{"delete a collection", "DELETE", "/api/domains/", 405, "405"},
		{"get an operation", "GET", "/api/domains/backup/", 405, "405"},
		{"node without trailing slash", "GET", "/api/nodes/" + node, 200, ""},
		{"collection without trailing slash", "GET", "/api/nodes", 200, ""},
		{"docs", "GET", "/api/docs/", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := c.do(tc.method, tc.path, nil)
			if st != tc.want {
				t.Fatalf("status %d, want %d: %s", st, tc.want, b)
			}
			if tc.code != "" {
				if e := errorOf(t, b); e["code"] != tc.code {
					t.Fatalf("code %v, want %s", e["code"], tc.code)
				}
			}
		})
	}
}

func TestWireFieldsMatchPlatformFacts(t *testing.T) {
	s, c := newSim(t, Options{Nodes: 10, StringPercentNodes: 0.5, VMs: 40, Templates: 2, InitialEvents: 5})
	var sawString, sawNumber bool
	for _, n := range results(t, c.json("GET", "/api/nodes/", nil, 200)) {
		if _, ok := n["cluster"].(map[string]any); !ok {
			t.Fatalf("node list cluster is not an object: %v", n["cluster"])
		}
		switch n["cpu_used_percent_user"].(type) {
		case string:
			sawString = true
		case float64:
			sawNumber = true
		}
	}
	if !sawString || !sawNumber {
		t.Fatalf("want both string and number usage percents (string %v, number %v)", sawString, sawNumber)
	}
	nd := c.json("GET", "/api/nodes/"+s.NodeIDs()[0]+"/", nil, 200)
	if _, ok := nd["cluster"].(string); !ok {
		t.Fatalf("node detail cluster is not a uuid string: %v", nd["cluster"])
	}
	for _, f := range []string{"version", "ballooning", "uptime", "cpu_topology", "created", "modified"} {
		if _, ok := nd[f]; !ok {
			t.Fatalf("node detail lacks %s", f)
		}
	}
	var sawThin, sawEmptyGU bool
	for _, d := range results(t, c.json("GET", "/api/domains/", nil, 200)) {
		if ps := d["user_power_state"].(float64); ps < 0 || ps > 3 {
			t.Fatalf("user_power_state %v", ps)
		}
		if d["thin"] == true {
			sawThin = true
			if p, ok := d["parent"].(map[string]any); !ok || p["id"] == "" {
				t.Fatalf("thin clone without parent object: %v", d)
			}
		}
		gu := d["guest_utils"].(map[string]any)
		if len(gu) == 0 {
			sawEmptyGU = true
		} else if _, ok := gu["qemu_state"].(bool); !ok {
			t.Fatalf("guest_utils without qemu_state: %v", gu)
		}
	}
	if !sawThin {
		t.Fatal("no thin clone of a template in the inventory")
	}
	_ = sawEmptyGU // depends on the seed; guest_utils {} is covered in TestDriversChangeState
	ev := results(t, c.json("GET", "/api/events/?limit=1", nil, 200))[0]
	if created := ev["created"].(string); len(created) != len("2021-08-20T10:08:09.761081Z") || !strings.HasSuffix(created, "Z") {
		t.Fatalf("created %q is not microsecond UTC", created)
	}
	for _, f := range []string{"id", "message", "detail_message", "user", "type", "task", "readed", "entities"} {
		if _, ok := ev[f]; !ok {
			t.Fatalf("event lacks %s: %v", f, ev)
		}
	}
}

func TestSameSeedSameInventory(t *testing.T) {
	fixed := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	body := func(seed int64, path string) string {
		s := New(Options{Seed: seed, VMs: 50, Nodes: 7, InitialEvents: 30, Now: fixed})
		defer s.Close()
		_, b := newClient(t, s).do("GET", path, nil)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		r, _ := json.Marshal(v["results"])
		return string(r)
	}
	for _, p := range []string{"/api/domains/", "/api/nodes/", "/api/events/", "/api/tasks/", "/api/data-pools/"} {
		if a, b := body(7, p), body(7, p); a != b {
			t.Fatalf("%s differs between two servers with the same seed", p)
		}
	}
	if body(7, "/api/domains/") == body(8, "/api/domains/") {
		t.Fatal("different seeds gave the same domains")
	}
}

func TestScaleInventoryServesPages(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10000, Nodes: 500, InitialEvents: 100000, Templates: 50})
	if v := c.json("GET", "/api/domains/?offset=9950&limit=100", nil, 200); v["count"] != float64(10000) || len(results(t, v)) != 50 {
		t.Fatalf("domains page: %v", v["count"])
	}
	if v := c.json("GET", "/api/nodes/?offset=400", nil, 200); v["count"] != float64(500) || len(results(t, v)) != 100 {
		t.Fatalf("nodes page: %v", v["count"])
	}
	if v := c.json("GET", "/api/events/?offset=99990", nil, 200); v["count"] != float64(100000) || len(results(t, v)) != 10 {
		t.Fatalf("events page: %v", v["count"])
	}
	if v := c.json("GET", "/api/domains/?ordering=-verbose_name&limit=2", nil, 200); len(results(t, v)) != 2 {
		t.Fatal("ordering page")
	}
	_ = s
}
