package veiltest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestSetNodeStatusShowsInListAndJournal(t *testing.T) {
	s := New(Options{Seed: 3, Nodes: 2, VMs: 2})
	defer s.Close()
	id := s.NodeIDs()[1]
	before := s.EventCount()
	resp, err := http.Post(s.URL+"/_sim/nodes/"+id+"/status", "application/json", strings.NewReader(`{"status":"SERVICE"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("control answered %s", resp.Status)
	}
	req, _ := http.NewRequest("GET", s.URL+"/api/nodes/"+id+"/", nil)
	req.Header.Set("Authorization", "jwt "+s.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		t.Fatal(err)
	}
	if n.Status != "SERVICE" {
		t.Errorf("node status %q, want SERVICE", n.Status)
	}
	if s.EventCount() != before+1 {
		t.Error("no event written for the status change")
	}
	if err := s.SetNodeStatus("no-such-node", "ACTIVE"); err == nil {
		t.Error("unknown node accepted")
	}
}
