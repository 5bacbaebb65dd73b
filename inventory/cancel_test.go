package inventory

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/config"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestCancelledRefreshKeepsTheControllerUp: a refresh cut short because the exporter stops the
// controller (shutdown, reload) is not a controller failure: veil_up stays, nothing is logged.
func TestCancelledRefreshKeepsTheControllerUp(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 11, Nodes: 2, VMs: 5})
	defer sim.Close()
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := config.Default().Collect
	inv, err := NewStore("c", client, cfg, log.NewLogfmtLogger(log.NewSyncWriter(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	sim.SetLatency(time.Second, 0)
	sim.ResetRequests() // InFlightMax counts from here
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inv.Refresh(ctx) }()
	// The refresh's requests are waiting at the controller.
	tu.Eventually(t, 10*time.Second, func() bool { return sim.InFlightMax() > 0 }, "a request of the refresh in flight")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh returned %v, want context.Canceled", err)
	}
	st := inv.Status()
	if !st.Up || st.LastError != "" {
		t.Errorf("after a cancelled refresh: up=%v error=%q, want up and no error", st.Up, st.LastError)
	}
	if bytes.Contains(logs.Bytes(), []byte("down")) {
		t.Errorf("a cancelled refresh was logged as an outage:\n%s", logs.String())
	}
}
