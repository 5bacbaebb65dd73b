package web

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// BenchmarkSDDomains measures one /sd/domains request, in ms, for an inventory of 50,000 VMs
// (VEIL_BENCH_SD_VMS changes it; about 34,000 are on with an address) read from the simulator by
// a real inventory. "cached" is every request after the first of a refresh (the filtered, sorted
// targets are kept per snapshot); "after refresh" also pays for filtering and sorting a new
// snapshot; "with os_id" renders with an os_id for every listed guest, as after the guest
// checker has seen them all; "filter" are requests with server-side filters or ?family=any.
func BenchmarkSDDomains(b *testing.B) {
	vms := 50000
	if v, err := strconv.Atoi(os.Getenv("VEIL_BENCH_SD_VMS")); err == nil && v > 0 {
		vms = v
	}
	sim := veiltest.New(veiltest.Options{Seed: 1, VMs: vms, Nodes: 200, InitialTasks: -1})
	defer sim.Close()
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token, Timeout: time.Minute, MaxConcurrency: 8})
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Collect.Tasks = false
	inv, err := newBenchInventory(client, cfg.Collect)
	if err != nil {
		b.Fatal(err)
	}
	if err := inv.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	d, _ := newServer(&fakeSource{discovery: Discovery{Port: 9100, Controllers: []DiscoveryController{{Name: "bench", Targets: inv}}}})

	var body []byte
	serveQuery := func(b *testing.B, query string) int {
		rec := httptest.NewRecorder()
		d.serveSD(rec, httptest.NewRequest("GET", "/sd/domains"+query, nil))
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		body = rec.Body.Bytes()
		return rec.Body.Len()
	}
	serve := func(b *testing.B) int { return serveQuery(b, "") }
	report := func(b *testing.B, size int) {
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/req")
		b.ReportMetric(float64(bytes.Count(body, []byte(`{"targets":`))), "targets")
		b.ReportMetric(float64(size)/1e6, "MB/resp")
	}
	b.Run("cached", func(b *testing.B) {
		size := 0
		for b.Loop() {
			size = serve(b)
		}
		report(b, size)
	})
	// Server-side filters: what a job that wants some of the guests pays and receives.
	for _, q := range []string{"?tag=prod", "?node=" + sim.NodeIDs()[0], "?family=any"} {
		b.Run("filter "+q, func(b *testing.B) {
			size := 0
			for b.Loop() {
				size = serveQuery(b, q)
			}
			report(b, size)
		})
	}
	b.Run("after refresh", func(b *testing.B) {
		size := 0
		for b.Loop() {
			b.StopTimer()
			inv.Refresh(context.Background()) // a new snapshot generation
			b.StartTimer()
			size = serve(b)
		}
		report(b, size)
	})
	b.Run("with os_id", func(b *testing.B) {
		targets := inv.GuestTargets()
		os := make(map[string]string, len(targets))
		for _, t := range targets {
			os[t.Domain.ID] = "ubuntu"
		}
		size := 0
		for b.Loop() {
			body = appendSD(nil, []sdSource{{controller: "bench", targets: inv.GuestTargets(), osIDs: os}}, &sdQuery{port: "9100", family: familyIPv4})
			size = len(body)
		}
		report(b, size)
	})
}

func newBenchInventory(client *veil.Client, c config.Collect) (*collector.Inventory, error) {
	return collector.NewInventory("bench", client, c, nil, nil)
}
