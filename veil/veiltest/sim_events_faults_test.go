package veiltest

// This file holds the tests of the event journal (ordering, retention, events created at the
// same time), of fault injection of each kind, and of the request log.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func eventIDs(t *testing.T, c *client, q string) []string {
	t.Helper()
	var ids []string
	for _, e := range results(t, c.json("GET", "/api/events/?"+q, nil, 200)) {
		ids = append(ids, e["id"].(string))
	}
	return ids
}

func TestEventsOrderingRetentionAndSameCreated(t *testing.T) {
	for _, order := range []string{"newest_first", "oldest_first"} {
		t.Run(order, func(t *testing.T) {
			s, c := newSim(t, Options{VMs: 3, EventsOrder: order})
			ids := s.AddEvents(5, EventSpec{Type: "warning"})
			got := eventIDs(t, c, "")
			want := ids
			if order == "newest_first" {
				want = []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("default order %v, want %v", got, want)
			}
			asc := eventIDs(t, c, "ordering=created")
			desc := eventIDs(t, c, "ordering=-created")
			if asc[0] != ids[0] || desc[0] != ids[4] {
				t.Fatalf("ordering parameter ignored: asc %v desc %v", asc, desc)
			}
			if n := len(eventIDs(t, c, "type=warning")); n != 5 {
				t.Fatalf("type filter returned %d", n)
			}
		})
	}

	t.Run("same created instant", func(t *testing.T) {
		sim, c := newSim(t, Options{VMs: 3})
		sim.AddEvents(4, EventSpec{SameCreated: true, Type: "error", EntityClass: "node"})
		rs := results(t, c.json("GET", "/api/events/?type=error", nil, 200))
		if len(rs) != 4 {
			t.Fatalf("%d events", len(rs))
		}
		for _, e := range rs {
			if e["created"] != rs[0]["created"] || e["entities"].([]any)[0].(map[string]any)["entity_class"] != "node" {
				t.Fatalf("events differ: %v vs %v", e, rs[0])
			}
		}
	})

	t.Run("retention deletes oldest", func(t *testing.T) { eventsRetention(t) })

	t.Run("background rate", func(t *testing.T) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		s, c := newSim(t, Options{VMs: 3, EventRate: 10, Now: clock})
		mu.Lock()
		now = now.Add(3 * time.Second)
		mu.Unlock()
		// 30 events are due; operations started in the last moments have not finished yet.
		v := c.json("GET", "/api/events/?limit=0", nil, 200)
		got := int(v["count"].(float64))
		if got < 24 || got > 30 {
			t.Fatalf("after 3s at 10/s: %d events, want about 30", got)
		}
		// Rate 0 stops the activity at once: its running tasks end now (their final events are
		// written), then the journal holds still.
		s.SetEventRate(0)
		if st := s.Summary(); st.TasksRunning != 0 {
			t.Fatalf("%d background tasks still running after rate 0", st.TasksRunning)
		}
		after := int(c.json("GET", "/api/events/?limit=0", nil, 200)["count"].(float64))
		if after < got || after > 32 {
			t.Fatalf("rate 0: %d events after %d", after, got)
		}
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		if n := s.EventCount(); n != after {
			t.Fatalf("rate 0 still generates: %d -> %d", after, n)
		}
	})
}

// eventsRetention: the journal keeps the newest EventsRetention events; the oldest are gone, also
// on request.
func eventsRetention(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3, EventsRetention: 10})
	ids := s.AddEvents(25, EventSpec{})
	if n := s.EventCount(); n != 10 {
		t.Fatalf("%d events kept", n)
	}
	got := eventIDs(t, c, "ordering=created")
	if got[0] != ids[15] || got[9] != ids[24] {
		t.Fatalf("kept %v, want the newest 10", got)
	}
	if st, _ := c.do("GET", "/api/events/"+ids[0]+"/", nil); st != 404 {
		t.Fatalf("deleted event answers %d", st)
	}
	if n := s.DeleteOldestEvents(3); n != 3 || s.EventCount() != 7 {
		t.Fatalf("DeleteOldestEvents removed %d, %d left", n, s.EventCount())
	}
}

func TestFaultsOfEachKind(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3})
	get := func() (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", s.URL+"/api/events/?limit=5", nil)
		req.Header.Set("Authorization", "jwt "+s.Token)
		// A fresh connection each time: net/http silently retries a GET whose reused
		// connection was reset, which would hide the fault.
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	for _, tc := range []struct {
		name  string
		fault Fault
		check func(t *testing.T, resp *http.Response, b []byte, err error)
	}{
		{"status 503 with error body", Fault{Path: "/api/events/*", Kind: "status", Status: 503}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 503 || errorOf(t, b)["code"] != "503" {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"html proxy page", Fault{Path: "/api/events", Kind: "html"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(b, []byte("<html>")) {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"truncated JSON", Fault{Kind: "truncated"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			var v any
			if err != nil || resp.StatusCode != 200 || json.Unmarshal(b, &v) == nil || !bytes.HasPrefix(b, []byte(`{"count"`)) {
				t.Fatalf("%v %v %s", err, resp, b)
			}
		}},
		{"connection reset", Fault{Kind: "reset", Method: "GET"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err == nil {
				t.Fatalf("no error after reset: %v", resp)
			}
		}},
		{"wrong types", Fault{Kind: "wrong_types"}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			var v map[string]any
			if err != nil || json.Unmarshal(b, &v) != nil {
				t.Fatalf("%v %s", err, b)
			}
			if _, ok := v["count"].(string); !ok {
				t.Fatalf("count not a string: %s", b)
			}
		}},
		{"latency", Fault{Kind: "latency", Latency: 150 * time.Millisecond}, func(t *testing.T, resp *http.Response, b []byte, err error) {
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", err, resp)
			}
			if r := s.Requests(); r[len(r)-1].Duration < 150*time.Millisecond {
				t.Fatalf("logged duration %v", r[len(r)-1].Duration)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fault.Count = 1
			s.SetFaults(tc.fault)
			resp, b, err := get()
			tc.check(t, resp, b, err)
			// Count 1: the next request is healthy again.
			if resp, b, err := get(); err != nil || resp.StatusCode != 200 {
				t.Fatalf("fault fired twice: %v %v %s", err, resp, b)
			}
		})
	}

	t.Run("non-matching path and method are untouched", func(t *testing.T) { faultsMatchPathAndMethod(t, s, c, get) })

	t.Run("fault rate answers 500 503 or 418", func(t *testing.T) { faultRate(t, s, c) })

	t.Run("control API sets faults and is never faulted", func(t *testing.T) { faultsByControlAPI(t, s, c) })
}

// faultsMatchPathAndMethod: a fault applies only to its path and method.
func faultsMatchPathAndMethod(t *testing.T, s *Server, c *client, get func() (*http.Response, []byte, error)) {
	s.SetFaults(Fault{Path: "/api/nodes/*", Kind: "status"}, Fault{Method: "POST", Kind: "status"})
	defer s.ClearFaults()
	if resp, _, err := get(); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	if st, _ := c.do("GET", "/api/nodes/", nil); st != 500 {
		t.Fatalf("nodes fault not applied: %d", st)
	}
}

// faultRate: with a fault rate of 1 every answer is a 500, 503 or 418, not always the same.
func faultRate(t *testing.T, s *Server, c *client) {
	s.SetFaultRate(1)
	defer s.SetFaultRate(0)
	seen := map[int]bool{}
	for range 30 {
		st, b := c.do("GET", "/api/domains/", nil)
		if st != 500 && st != 503 && st != 418 {
			t.Fatalf("status %d", st)
		}
		errorOf(t, b)
		seen[st] = true
	}
	if len(seen) < 2 {
		t.Fatalf("fault statuses not random: %v", seen)
	}
}

// faultsByControlAPI: faults set and cleared through /_sim/faults; the control API itself is never
// faulted.
func faultsByControlAPI(t *testing.T, s *Server, c *client) {
	resp, err := http.Post(s.URL+"/_sim/faults", "application/json", strings.NewReader(`[{"kind":"status","status":418}]`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	resp.Body.Close()
	if st, _ := c.do("GET", "/api/nodes/", nil); st != 418 {
		t.Fatalf("status %d, want 418", st)
	}
	resp, err = http.Get(s.URL + "/_sim/state")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	resp.Body.Close()
	resp, _ = http.Post(s.URL+"/_sim/faults", "application/json", strings.NewReader(`[]`))
	resp.Body.Close()
	if st, _ := c.do("GET", "/api/nodes/", nil); st != 200 {
		t.Fatalf("empty list did not clear faults: %d", st)
	}
}

func TestRequestLogAndInFlightMax(t *testing.T) {
	s, c := newSim(t, Options{VMs: 3, Latency: 100 * time.Millisecond})
	s.ResetRequests()
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.do("GET", "/api/nodes/?limit=2", nil)
		}()
	}
	wg.Wait()
	if m := s.InFlightMax(); m < 2 || m > 5 {
		t.Fatalf("InFlightMax %d with 5 concurrent slow requests", m)
	}
	s.SetLatency(0, 0)
	c.do("POST", "/api/domains/"+s.DomainIDs()[0]+"/shutdown/?async=1", map[string]any{"force": true})
	http.Get(s.URL + "/_sim/state")
	log := s.Requests()
	if len(log) != 6 {
		t.Fatalf("%d requests logged, want 6 (control API excluded)", len(log))
	}
	for _, r := range log[:5] {
		if r.Method != "GET" || r.Path != "/api/nodes/" || r.Query != "limit=2" || r.Status != 200 || r.Duration < 100*time.Millisecond {
			t.Fatalf("logged %+v", r)
		}
	}
	if last := log[5]; last.Method != "POST" || last.Status != 202 || !strings.Contains(last.Body, `"force":true`) {
		t.Fatalf("logged %+v", last)
	}
	s.ResetRequests()
	if len(s.Requests()) != 0 || s.InFlightMax() != 0 {
		t.Fatal("ResetRequests left entries")
	}
}
