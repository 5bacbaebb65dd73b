package veil

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestPacerSpacesReleasesEvenWhenWaitersPileUp: many goroutines waiting at once are let go one
// interval apart, measured at release; none goes early to catch up.
func TestPacerSpacesReleasesEvenWhenWaitersPileUp(t *testing.T) {
	p := newPacer(100) // 10 ms
	start := time.Now()
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	// The k-th release comes at least k intervals after the start, and a time recorded after a
	// release is never earlier than it: so the k-th smallest recorded time is at least that too,
	// however late any goroutine ran.
	for k, at := range times {
		if min := start.Add(time.Duration(k) * 10 * time.Millisecond); at.Before(min) {
			t.Errorf("release %d at +%s, before +%s: a burst", k, at.Sub(start), min.Sub(start))
		}
	}
}

func TestPacerGivesUpWhenThePermitIsPastTheDeadline(t *testing.T) {
	p := newPacer(1) // one per second
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.wait(ctx); !errors.Is(err, errRateWait) {
		t.Fatalf("err = %v, want errRateWait", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("gave up after %s, want at once", d)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := p.wait(ctx2); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

// TestPacerDoesNotBurstAfterAStall: a waiter that comes back long after its slot is let go at
// once, but the next one still waits a full interval after it.
func TestPacerDoesNotBurstAfterAStall(t *testing.T) {
	p := newPacer(100) // 10 ms
	for range 3 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the process "stalls": five slots pass unused
	back := time.Now()
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	prev := p.sched
	if prev.Before(back) {
		t.Errorf("the late waiter was slotted %s before it came back: the schedule catches up", back.Sub(prev))
	}
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gap := p.sched.Sub(prev); gap < p.interval {
		t.Errorf("the release after a stall was slotted %s after the previous one, want >= %s: a catch-up burst", gap, p.interval)
	}
	if p.actual.Before(p.sched) {
		t.Errorf("released at %s, before its slot %s", p.actual, p.sched)
	}
}
