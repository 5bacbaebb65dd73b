package veil

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"
)

// virtualClock is the pacer's clock in these tests: a sleep advances it by the time asked plus
// late (a process that is not run wakes late), and nothing really waits.
type virtualClock struct {
	mu    sync.Mutex
	t     time.Time
	late  time.Duration
	slept []time.Duration
}

// newVirtualPacer is a pacer of perSecond on a virtual clock that starts an hour from now, so
// that a deadline set on it lies an hour away in real time.
func newVirtualPacer(perSecond float64) (*pacer, *virtualClock) {
	c := &virtualClock{t: time.Now().Add(time.Hour)}
	p := newPacer(perSecond)
	p.now, p.sleep = c.now, c.sleep
	return p, c
}

func (c *virtualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *virtualClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.t = c.t.Add(d + c.late)
	return nil
}

func (c *virtualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPacerSpacesReleasesEvenWhenWaitersPileUp: many goroutines waiting at once are let go one
// interval apart, measured at release; none goes early to catch up. On the real clock: the
// bound is a lower one, which a late goroutine only makes easier.
func TestPacerSpacesReleasesEvenWhenWaitersPileUp(t *testing.T) {
	p := newPacer(100) // 10 ms
	start := time.Now()
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := p.wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
		})
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

// TestPacerHoldsTheRateWhenWakingLate: every wake-up comes late (a loaded machine), by less or
// more than an interval, and now and then the caller is slow too. The slots stay an interval
// apart, no release goes before its slot, and a window of a second holds at most what the
// slots allow plus the lateness: rate × (1 s + late + interval) + 1.
func TestPacerHoldsTheRateWhenWakingLate(t *testing.T) {
	const rate = 100.0 // 10 ms
	for _, late := range []time.Duration{3 * time.Millisecond, 10 * time.Millisecond, 35 * time.Millisecond} {
		p, clock := newVirtualPacer(rate)
		clock.late = late
		var sched, actual []time.Time
		for k := range 300 {
			if err := p.wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			sched, actual = append(sched, p.sched), append(actual, p.actual)
			if k%7 == 6 {
				clock.advance(25 * time.Millisecond)
			}
		}
		for k := range actual {
			if actual[k].Before(sched[k]) {
				t.Errorf("late %s: release %d went %s before its slot", late, k, sched[k].Sub(actual[k]))
				break
			}
			if k > 0 && sched[k].Sub(sched[k-1]) < p.interval {
				t.Errorf("late %s: slot %d is %s after the previous, under the %s interval", late, k, sched[k].Sub(sched[k-1]), p.interval)
				break
			}
		}
		limit := int(rate*(time.Second+late+p.interval).Seconds()) + 1
		j := 0
		for i := range actual {
			for actual[i].Sub(actual[j]) >= time.Second {
				j++
			}
			if n := i - j + 1; n > limit {
				t.Errorf("late %s: %d releases within a second, at most %d allowed", late, n, limit)
				break
			}
		}
	}
}

// TestPacerGivesUpWhenThePermitIsPastTheDeadline: a permit due after the context's deadline is
// refused without waiting for it.
func TestPacerGivesUpWhenThePermitIsPastTheDeadline(t *testing.T) {
	p, clock := newVirtualPacer(1) // one per second
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clock.now().Add(100*time.Millisecond))
	defer cancel()
	if err := p.wait(ctx); !errors.Is(err, errRateWait) {
		t.Fatalf("err = %v, want errRateWait", err)
	}
	if len(clock.slept) > 0 {
		t.Errorf("waited %v before giving up, want no wait", clock.slept)
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
	p, clock := newVirtualPacer(100) // 10 ms
	for range 3 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(50 * time.Millisecond) // the process "stalls": five slots pass unused
	back := clock.now()
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

// TestPacerSleepsOnTheRealClock: the pacer outside tests waits on the real clock: two releases
// at 20 per second are at least 50 ms apart (a lower bound: a late wake-up only widens it).
func TestPacerSleepsOnTheRealClock(t *testing.T) {
	p := newPacer(20)
	start := time.Now()
	for range 2 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("two releases at 20/s within %s", d)
	}
}
