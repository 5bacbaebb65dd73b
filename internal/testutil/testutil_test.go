package testutil

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestNATSStopsAndStartsOnTheSamePort(t *testing.T) {
	n := StartNATS(t)
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	n.Stop()
	Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client to notice the stop")
	n.Start()
	Eventually(t, 10*time.Second, nc.IsConnected, "client to reconnect")
}

func TestClusterElectsAMetaLeader(t *testing.T) {
	c := StartCluster(t)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := len(nc.Servers()); got < 3 {
		t.Fatalf("client knows %d servers, want 3", got)
	}
}
