package collector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// BenchmarkPushFreshness measures the inventory kept fresh by the push channel at benchVMs()
// VMs: 20 changes a second (VMs powered off and on through the simulator's control API) for
// 20 s, and for each the time from the change's request to its frame applied to the inventory
// and to the first render that shows it (what /metrics serves): p50 and p99 against the goal
// of 1 s. Also the exporter's CPU per change, and the controller requests an hour with the push
// (the requests made in the window, which list tasks and the version every collect.interval,
// plus a full listing every collect.resync_interval) against polling every collect.interval.
func BenchmarkPushFreshness(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		url, token := benchTarget()
		var sent, listed atomic.Int64 // requests; those listing the pushed collections
		pushedPaths := map[string]bool{"/api/nodes/": true, "/api/clusters/": true, "/api/data-pools/": true, "/api/domains/": true}
		client, err := veil.New(veil.Config{URL: url, Token: token, MaxConcurrency: benchConcurrency, Timeout: 30 * time.Second,
			Observer: func(endpoint string, _ int, _ time.Duration) {
				sent.Add(1)
				if pushedPaths[endpoint] {
					listed.Add(1)
				}
			}})
		if err != nil {
			b.Fatal(err)
		}
		cfg := testCollect()
		inv, err := newTestInventory(client, cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		// Each render reports the frames it shows; a change is visible once a render shows
		// the frame that applied it.
		type rendered struct {
			at      time.Time
			applied uint64
		}
		var rmu sync.Mutex
		var renders []rendered
		inv.renderHook = func(applied uint64) {
			rmu.Lock()
			renders = append(renders, rendered{time.Now(), applied})
			rmu.Unlock()
		}
		feed := inventory.NewPushFeed("bench", client, inv.Store, cfg.ResyncInterval, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, 2)
		go func() { inv.Run(ctx); done <- struct{}{} }()
		go func() { feed.Run(ctx); done <- struct{}{} }()
		defer func() { cancel(); <-done; <-done }()
		deadline := time.Now().Add(5 * time.Minute)
		for !(feed.Status().Mode == inventory.PushModePush && inv.Status().LastAttempt.After(feed.Status().Since) && inv.Ready()) {
			if time.Now().After(deadline) {
				b.Fatalf("no push mode and refresh after it: %+v", feed.Status())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The refresh at the start and the one after the connect each listed them in full.
		pushedListing := float64(listed.Load()) / 2
		var vms []string
		power := map[string]int{}
		for _, d := range inv.Domains() {
			if !d.Template {
				vms = append(vms, d.ID)
				power[d.ID] = int(d.UserPowerState)
			}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		const rate, window = 20, time.Minute
		type change struct {
			id      string
			state   int // user_power_state after it
			at      time.Time
			applied time.Time // first seen in the inventory
			seq     uint64    // frames applied when it was seen
		}
		var changes []*change
		pending := map[string]*change{}
		var pmu sync.Mutex
		// A watcher sees each change land in the inventory.
		stopWatch := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			var seen *veil.Domain
			seenPending := 0
			for {
				select {
				case <-stopWatch:
					return
				case <-t.C:
				}
				pmu.Lock()
				if len(pending) == 0 {
					pmu.Unlock()
					continue
				}
				snap := inv.Snapshot()
				// Every change replaces the slice (copied at its first edit): an unchanged one
				// is not scanned again, so the watcher's CPU stays out of the exporter's figure.
				if len(snap.Domains) > 0 && &snap.Domains[0] == seen && len(pending) == seenPending {
					pmu.Unlock()
					continue
				}
				if len(snap.Domains) > 0 {
					seen = &snap.Domains[0]
				}
				now := time.Now()
				for i := range snap.Domains {
					d := &snap.Domains[i]
					if c := pending[d.ID]; c != nil && int(d.UserPowerState) == c.state {
						c.applied, c.seq = now, snap.Applied
						delete(pending, d.ID)
					}
				}
				seenPending = len(pending)
				pmu.Unlock()
			}
		}()
		sent.Store(0)
		listed.Store(0)
		cpu0 := processCPU()
		hc := &http.Client{Timeout: 10 * time.Second}
		start := time.Now()
		b.ResetTimer()
		for i := 0; time.Since(start) < window; i++ {
			if wait := time.Until(start.Add(time.Duration(i) * time.Second / rate)); wait > 0 {
				time.Sleep(wait)
			}
			pmu.Lock()
			var id string
			for { // a VM with no change in flight
				id = vms[rng.IntN(len(vms))]
				if pending[id] == nil {
					break
				}
			}
			pmu.Unlock()
			action, state := "power_off", 1
			if power[id] == 1 {
				action, state = "power_on", 3
			}
			c := &change{id: id, state: state, at: time.Now()}
			pmu.Lock()
			pending[id] = c
			changes = append(changes, c)
			pmu.Unlock()
			resp, err := hc.Post(url+"/_sim/domains/"+id+"/"+action, "application/json", strings.NewReader("{}"))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s %s: %s", action, id, resp.Status)
			}
			power[id] = state
		}
		for end := time.Now().Add(30 * time.Second); ; {
			pmu.Lock()
			n := len(pending)
			pmu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(end) {
				b.Fatalf("%d changes never reached the inventory", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		close(stopWatch)
		<-watched
		cpu := processCPU() - cpu0
		windowReqs := float64(sent.Load())
		// Visible: the first render that shows the frame count the change was seen at.
		for end := time.Now().Add(30 * time.Second); ; {
			rmu.Lock()
			last := uint64(0)
			if len(renders) > 0 {
				last = renders[len(renders)-1].applied
			}
			rmu.Unlock()
			if last >= changes[len(changes)-1].seq {
				break
			}
			if time.Now().After(end) {
				b.Fatal("the last change was never rendered")
			}
			time.Sleep(10 * time.Millisecond)
		}
		rmu.Lock()
		rs := slices.Clone(renders)
		rmu.Unlock()
		var toInv, toMetrics []float64
		for _, c := range changes {
			toInv = append(toInv, c.applied.Sub(c.at).Seconds())
			j, _ := slices.BinarySearchFunc(rs, c.seq, func(r rendered, seq uint64) int {
				switch {
				case r.applied < seq:
					return -1
				case r.applied > seq:
					return 1
				}
				return 0
			})
			for j < len(rs) && rs[j].at.Before(c.applied) {
				j++ // a render of these frames that began before they were seen
			}
			if j == len(rs) {
				b.Fatalf("change of %s never rendered", c.id)
			}
			toMetrics = append(toMetrics, rs[j].at.Sub(c.at).Seconds())
		}
		slices.Sort(toInv)
		slices.Sort(toMetrics)
		q := func(s []float64, p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
		b.ReportMetric(float64(len(changes)), "changes")
		b.ReportMetric(q(toInv, 0.5), "inventory-p50-s")
		b.ReportMetric(q(toInv, 0.99), "inventory-p99-s")
		b.ReportMetric(q(toMetrics, 0.5), "metrics-p50-s")
		b.ReportMetric(q(toMetrics, 0.99), "metrics-p99-s")
		b.ReportMetric(q(toMetrics, 0.99)/1.0, "p99-ratio-to-goal")
		b.ReportMetric(cpu.Seconds()/float64(len(changes)), "cpu-s/change")
		if listed.Load() != 0 {
			b.Fatalf("%d listings of the pushed collections during the window", listed.Load())
		}
		// Requests an hour: what both make (tasks and the version every interval, disks and
		// interfaces every resync), the window's scaled to an hour, plus the pushed collections
		// listed every resync with the push and every interval without.
		both := windowReqs / elapsed.Seconds() * 3600
		pushHour := both + pushedListing*(time.Hour.Seconds()/cfg.ResyncInterval.Seconds())
		pollHour := both + pushedListing*(time.Hour.Seconds()/cfg.Interval.Seconds())
		b.ReportMetric(pushHour, "push-requests/h")
		b.ReportMetric(pollHour, "poll-requests/h")
		b.ReportMetric(pushHour/pollHour, "requests-ratio-to-polling")
	})
}
