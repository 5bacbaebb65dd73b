package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// TestCollectorViewStates: the page's state of a run: ok, failing, or unavailable (neutral).
func TestCollectorViewStates(t *testing.T) {
	for _, tt := range []struct {
		in   runstatus.Status
		want string
	}{
		{runstatus.Status{Collector: "nodes", Success: true}, "ok"},
		{runstatus.Status{Collector: "tasks", Error: "timeout"}, "failing"},
		{runstatus.Status{Collector: "datapools", Unavailable: true, Error: "404"}, "unavailable"},
	} {
		if got := collectorView(tt.in); got.State != tt.want || got.Collector != tt.in.Collector || got.Error != tt.in.Error {
			t.Errorf("collectorView(%+v) = %+v, want state %s", tt.in, got, tt.want)
		}
	}
}

// TestStatusOfEveryPart: each part a controller reports reaches its section of the page (nil
// parts stay absent), its runs become collectors, its problems are sorted failures first and
// capped at maxProblems with the total said, and URLs lose their passwords; the problems the
// source handed over are left as they were.
func TestStatusOfEveryPart(t *testing.T) {
	var ps []collector.Problem
	for i := range maxProblems + 5 {
		ps = append(ps, collector.Problem{Kind: "node", ID: fmt.Sprint(i), Name: fmt.Sprintf("n%02d", i), State: "SERVICE"})
	}
	ps = append(ps, collector.Problem{Kind: "guest", ID: "g", Name: "web", State: "not answering", Failure: true})
	first := ps[0]
	nats := natsconn.Status{URL: "nats://u:pw@nats:4222", Connected: true}
	st := statusOf(Status{NATS: &nats, Controllers: []Controller{
		{
			Name: "full", URL: "https://user:secret@veil.example", Runs: []runstatus.Status{{Collector: "nodes", Success: true}},
			Problems: ps, Push: &collector.PushStatus{Mode: "push"}, KV: &changefeed.Status{Bucket: "B"},
			Guest: &collector.GuestStatus{Eligible: 3}, Events: &forwarder.Status{Subject: "s.>"},
		},
		{Name: "bare"},
	}})
	full, bare := st.Controllers[0], st.Controllers[1]
	if full.Inventory.Push == nil || full.Inventory.KV == nil || full.Guest == nil || full.Events == nil {
		t.Errorf("a part reported is missing from the page: %+v", full)
	}
	if bare.Inventory.Push != nil || bare.Inventory.KV != nil || bare.Guest != nil || bare.Events != nil || bare.Collectors == nil || bare.Problems == nil {
		t.Errorf("a controller without parts: %+v, want none shown and empty lists", bare)
	}
	if len(full.Collectors) != 1 || full.Collectors[0].State != "ok" {
		t.Errorf("collectors %+v", full.Collectors)
	}
	if len(full.Problems) != maxProblems || full.ProblemsTotal != len(ps) || !full.Problems[0].Failure {
		t.Errorf("%d problems of %d shown, first %+v: want %d, the failure first", len(full.Problems), full.ProblemsTotal, full.Problems[0], maxProblems)
	}
	if ps[0] != first {
		t.Error("sorting changed the source's problems")
	}
	if strings.Contains(full.URL, "secret") || strings.Contains(st.NATS.URL, "pw") {
		t.Errorf("a password is shown: %s, %s", full.URL, st.NATS.URL)
	}
}
