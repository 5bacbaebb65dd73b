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

// TestFreePortNeverRepeats: a cluster takes six ports at once; the kernel may hand a just-closed
// port out again, and two nodes given one port never form a cluster.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		seen[p] = true
	}
}
