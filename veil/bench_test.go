package veil_test

import (
	"context"
	"os"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// BenchmarkListDomains10k reads the full inventory of 10,000 VMs from the simulator through
// the client with its default limits (8 in flight, no rate limit): 100 pages. With
// VEIL_BENCH_URL (and VEIL_BENCH_TOKEN) set it reads that server instead, e.g. a
// `go run ./cmd/veil-sim --vms 10000`.
func BenchmarkListDomains10k(b *testing.B) {
	cfg := veil.Config{URL: os.Getenv("VEIL_BENCH_URL"), Token: os.Getenv("VEIL_BENCH_TOKEN")}
	if cfg.URL == "" {
		sim := newSim(b, veiltest.Options{Seed: 30, VMs: 10000, Nodes: 500})
		cfg.URL, cfg.Token = sim.URL, sim.Token
	}
	if cfg.Token == "" {
		cfg.Token = "sim-token"
	}
	c, err := veil.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ds, err := c.Domains(ctx, nil)
		if err != nil || len(ds) != 10000 {
			b.Fatalf("%d domains, %v", len(ds), err)
		}
	}
}

// BenchmarkEventsPage reads one page of 100 events of a 100,000-event journal, Raw kept.
func BenchmarkEventsPage(b *testing.B) {
	sim := newSim(b, veiltest.Options{Seed: 31, InitialEvents: 100000})
	c := newClient(b, sim, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := c.EventsPage(ctx, 50000, 100, "created")
		if err != nil || len(p.Results) != 100 {
			b.Fatalf("%d events, %v", len(p.Results), err)
		}
	}
}

// BenchmarkListEvents100k pages through the whole 100,000-event journal.
func BenchmarkListEvents100k(b *testing.B) {
	sim := newSim(b, veiltest.Options{Seed: 32, InitialEvents: 100000})
	c := newClient(b, sim, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for _, err := range veil.List[veil.Event](ctx, c, "/api/events/", nil) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 100000 {
			b.Fatalf("%d events", n)
		}
	}
}
