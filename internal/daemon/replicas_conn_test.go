// Tests that the leases travel on a NATS connection of their own.

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestLeasesOnAConnectionOfTheirOwn: with replicas on, the coordinator renews its leases over
// a NATS connection of its own, not the one the controllers' inventory and events use. On a
// shared connection a replica running 500 controllers let all its leases lapse every 10 to 20
// seconds: the renewals waited for the client connection's lock behind the controllers'
// traffic (a goroutine dump of the fleet benchmark's exporter), longer than a lease holds.
func TestLeasesOnAConnectionOfTheirOwn(t *testing.T) {
	ns := testutil.StartNATS(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	sim := veiltest.New(veiltest.Options{Seed: 1, Token: testutil.SecretToken, VMs: 1})
	t.Cleanup(sim.Close)
	cfgFile := filepath.Join(dir, "veil.yaml")
	testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", sim.URL, tok))
	f, err := os.OpenFile(cfgFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("ha: {enabled: true, lease_ttl: 3s, instance: pod-a, replicas: 1}\nnats: {url: " + ns.URL() + "}\n")
	f.Close()
	d := startDaemon(t, cfgFile)
	testutil.Eventually(t, 20*time.Second, func() bool {
		mine, _ := leads(t, d)
		return strings.Join(mine, ",") == "alpha"
	}, "alpha runs here; logs:\n%s", d.logs)
	if n := ns.Server().NumClients(); n != 2 {
		t.Errorf("the exporter has %d connections to NATS, want 2: the controllers' and the leases'", n)
	}
}
