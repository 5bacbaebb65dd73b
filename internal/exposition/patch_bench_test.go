package exposition

// The CPU of one pushed change as the inventory makes it: a series of a VM family of 10,000
// removed and added with another label value, by Patch.

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkPatchOne patches one VM's power state in a family of 10,000 series per op: one block
// read back, cut again and recompressed, the others kept; in blocks of each shape.
func BenchmarkPatchOne(b *testing.B) {
	for _, s := range []blockShape{{16, 32, 128}, {32, 64, 256}, {64, 128, 512}} {
		b.Run(fmt.Sprintf("min=%d,every=%d", s.min, s.every), func(b *testing.B) {
			withShape(b, s)
			benchPatchOne(b)
		})
	}
}

func benchPatchOne(b *testing.B) {
	d := NewDesc("veil_domain_power_state", "Power.", prometheus.GaugeValue, []string{"domain_id", "state"}, prometheus.Labels{"controller": "c1"})
	ids := vmIDs(10000)
	states := make([]string, len(ids))
	for i := range states {
		states[i] = "on"
	}
	var bl Builder
	for i, id := range ids {
		bl.Add(d, 1, id, states[i])
	}
	set := bl.Finish()
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		j := i * 7919 % len(ids)
		bl.since(set)
		s := bl.Sink()
		if !s.Patch(d) {
			b.Fatal("no family to patch")
		}
		s.Removing().Add(d, 1, ids[j], states[j])
		states[j] = map[string]string{"on": "off", "off": "on"}[states[j]]
		s.Add(d, 1, ids[j], states[j])
		set = bl.Finish()
	}
	b.StopTimer()
	// CPU time, not the wall clock: the machine this runs on is shared.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
