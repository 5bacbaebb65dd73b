package veil_test

// Benchmarks of page decoding alone: a page of each large listing, read once from the
// simulator, then decoded again and again (no HTTP), as an inventory refresh decodes them;
// cpu-ns/op is the process's CPU time per page.

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// pageBody reads the first page (100) of path from a simulator of 1,000 VMs.
func pageBody(b *testing.B, path string) []byte {
	sim := newSim(b, veiltest.Options{Seed: 33, VMs: 1000, Nodes: 100, Datapools: 20, InitialEvents: 1000})
	c := newClient(b, sim, nil)
	body, err := veil.PageBody(context.Background(), c, veil.PageRequest{Path: path, Limit: 100})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// benchDecode decodes body as a page of T.
func benchDecode[T any](b *testing.B, path string) {
	body := pageBody(b, path)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		p, err := veil.DecodePage[T](path, body, 0)
		if err != nil || len(p.Results) == 0 {
			b.Fatalf("%d results, %v", len(p.Results), err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used (user and system, every thread, the garbage
// collector's too). On a shared machine it varies less than ns/op, which counts the time the
// benchmark waited for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkDecodePage(b *testing.B) {
	b.Run("domains", func(b *testing.B) { benchDecode[veil.Domain](b, "/api/domains/") })
	b.Run("vdisks", func(b *testing.B) { benchDecode[veil.Vdisk](b, "/api/vdisks/") })
	b.Run("vmachine-infs", func(b *testing.B) { benchDecode[veil.VMachineInf](b, "/api/vmachine-infs/") })
	b.Run("nodes", func(b *testing.B) { benchDecode[veil.Node](b, "/api/nodes/") })
	b.Run("data-pools", func(b *testing.B) { benchDecode[veil.Datapool](b, "/api/data-pools/") })
	b.Run("events", func(b *testing.B) { benchDecode[veil.Event](b, "/api/events/") })
}
