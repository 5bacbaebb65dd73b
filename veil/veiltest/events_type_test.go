package veiltest

import "testing"

// TestAddEventsOfAnyType: a type outside info/warning/error (a platform may have more) gets a
// message instead of a panic.
func TestAddEventsOfAnyType(t *testing.T) {
	s := New(Options{Seed: 5, VMs: 3})
	defer s.Close()
	before := s.EventCount()
	if ids := s.AddEvents(3, EventSpec{Type: "audit"}); len(ids) != 3 {
		t.Fatalf("added %d events, want 3", len(ids))
	}
	if s.EventCount() != before+3 {
		t.Errorf("journal has %d events, want %d", s.EventCount(), before+3)
	}
}
