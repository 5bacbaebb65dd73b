package collector

// The render's own cost, without a simulator's latency in the timing: a pushed change (one VM's
// power flipped, applied to the store and rendered against the last Set) and a refresh's render
// (the store listed again, every VM a new object, rendered against the last Set).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// renderBench is an inventory of benchVMs() VMs read from a simulator without latency, whose
// renders the benchmark starts itself (the cache's Run, without the view's watch of the store).
type renderBench struct {
	inv      testInventory
	rendered chan uint64 // the frames applied each render shows
}

func startRenderBench(b *testing.B) *renderBench {
	b.Helper()
	sim := veiltest.New(veiltest.Options{Seed: 1, VMs: benchVMs(), Nodes: benchNodes, Datapools: benchPools, Clusters: 5})
	b.Cleanup(sim.Close)
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token, MaxConcurrency: benchConcurrency, Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	inv, err := newTestInventory(client, pushCollect(), nil)
	if err != nil {
		b.Fatal(err)
	}
	rb := &renderBench{inv: inv, rendered: make(chan uint64, 1)}
	if err := inv.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	inv.Inventory.renderHook = func(applied uint64) { rb.rendered <- applied }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inv.Inventory.cache.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	rb.render() // the refreshed snapshot: the Set the benchmark's renders replace
	return rb
}

// render renders the store's latest snapshot and waits for it.
func (rb *renderBench) render() uint64 {
	rb.inv.Inventory.cache.Invalidate()
	return <-rb.rendered
}

// BenchmarkRenderPush: one pushed change per op, a VM's power flipped (the whole object
// pushed, as the controller sends it), applied and rendered: the push path's CPU per change.
func BenchmarkRenderPush(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		rb := startRenderBench(b)
		vms := rb.inv.Domains()
		frames := make([][2]veil.PushFrame, 0, 64)
		for _, d := range vms[:64] {
			var pair [2]veil.PushFrame
			flipped := veil.Number(veil.PowerOff)
			if d.UserPowerState == veil.PowerOff {
				flipped = veil.PowerOn
			}
			for k, power := range []veil.Number{flipped, d.UserPowerState} { // there and back
				c := *d
				c.UserPowerState = power
				obj, err := platformJSON(c)
				if err != nil {
					b.Fatal(err)
				}
				pair[k] = veil.PushFrame{Resource: "/domains/", Event: veil.PushUpdated, ID: d.ID, Object: obj}
			}
			frames = append(frames, pair)
		}
		cpu0 := processCPU()
		i := 0
		for b.Loop() {
			rb.inv.Apply([]veil.PushFrame{frames[i%len(frames)][i/len(frames)%2]})
			rb.render()
			i++
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(i), "cpu-ns/change")
	})
}

// BenchmarkRenderRefresh: a refresh's render, every VM, node and device listed again (new
// objects, the same contents where the simulator's usages did not move), against the last Set.
// The listing itself is not timed.
func BenchmarkRenderRefresh(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		rb := startRenderBench(b)
		var cpu, listing time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			cpu0 := processCPU()
			if err := rb.inv.Refresh(context.Background()); err != nil {
				b.Fatal(err)
			}
			cpu1 := processCPU()
			b.StartTimer()
			rb.render()
			cpu += processCPU() - cpu1
			listing += cpu1 - cpu0
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/render")
		// The refresh itself (the simulator's answers included: it runs in this process).
		b.ReportMetric(float64(listing.Nanoseconds())/float64(b.N), "cpu-ns/refresh")
	})
}

// BenchmarkRenderFresh: every family rendered and compressed from scratch (no previous Set).
func BenchmarkRenderFresh(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		rb := startRenderBench(b)
		b.ReportAllocs()
		for b.Loop() {
			rb.inv.renderFresh()
		}
	})
}

// BenchmarkDiffListing: what a refresh's render compares, every VM of one listing against the
// same VM of the next (new objects, mostly the same contents), family by family.
func BenchmarkDiffListing(b *testing.B) {
	b.Run(fmt.Sprintf("vms=%d", benchVMs()), func(b *testing.B) {
		rb := startRenderBench(b)
		prev := rb.inv.Snapshot().Domains.Slice()
		if err := rb.inv.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
		cur := rb.inv.Snapshot().Domains.Slice()
		d := newDiffer(rb.inv.fams.domains)
		for b.Loop() {
			if _, ok := diffAllDomains(prev, cur, d); !ok {
				b.Fatal("not comparable")
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(cur)), "ns/vm")
	})
}
