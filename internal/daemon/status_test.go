package daemon

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// natsWithPassword runs a nats-server with JetStream that demands a user and password.
func natsWithPassword(t *testing.T, user, password string) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: user, Password: password, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestStatusPageWithEvents runs the daemon against the simulator and a password-protected
// NATS named in a server list: the page and its JSON show every section and the events just
// forwarded, and neither they, the metrics nor the logs (a disconnect included) hold the token
// or the NATS password.
func TestStatusPageWithEvents(t *testing.T) {
	const natsPassword = "n4ts-pa55word-xyz"
	d, natsSrv := startWithEvents(t, natsPassword)
	natsAddr := natsSrv.Addr().String() // Addr is nil once the server is shut down
	js, recent := statusJSONWithEvents(t, d, natsAddr)
	page := statusPageWithEvents(t, d, recent)

	_, metrics := d.get(t, "/metrics")
	// A lost server is logged with the URL list.
	natsSrv.Shutdown()
	testutil.Eventually(t, 15*time.Second, func() bool { return strings.Contains(d.logs.String(), "NATS disconnected") }, "the disconnect logged")
	if !strings.Contains(d.logs.String(), "xxxxx@"+natsAddr) {
		t.Errorf("the disconnect line lacks the redacted URL list:\n%s", d.logs.String())
	}
	d.stop()
	d.stop = func() {}
	logsNameTheirComponent(t, d)
	for what, text := range map[string]string{"/": page, "json status": js, "/metrics": metrics, "logs": d.logs.String()} {
		for _, secret := range []string{testutil.SecretToken, natsPassword} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds the secret %q", what, secret)
			}
		}
	}
}

// startWithEvents runs the daemon with guest checks and events on against the simulator and a
// NATS demanding password, named second in a server list, until it is ready.
func startWithEvents(t *testing.T, natsPassword string) (*daemonUnderTest, *server.Server) {
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 3, Token: testutil.SecretToken, VMs: 5, InitialEvents: 30, EventsOrder: "oldest_first"})
	t.Cleanup(sim.Close)
	natsSrv := natsWithPassword(t, "veil", natsPassword)
	// The list's first server is not there; the client moves on to the second.
	natsURL := fmt.Sprintf("nats://%s,nats://veil:%s@%s", freeAddr(t), natsPassword, natsSrv.Addr().String())
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte(testutil.SecretToken), 0o600)
	cfgFile := filepath.Join(dir, "veil.yaml")
	cfg := "controllers:\n" + testutil.ControllerYAML("alpha", sim.URL, tok) +
		"collect:\n  interval: 1s\n" +
		"guest:\n  enabled: true\n  ping_interval: 1s\n" +
		fmt.Sprintf("events:\n  enabled: true\n  poll_interval: 100ms\n  start: earliest\n  checkpoint: {store: file, dir: %s}\n", dir) +
		fmt.Sprintf("nats:\n  url: %q\n", natsURL)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgFile)
	d.waitReady(t)
	return d, natsSrv
}

// recentEvent is one of the status JSON's recent events.
type recentEvent struct{ ID, Subject, Message string }

// statusJSONWithEvents waits until the status JSON shows 30 events published, the push channel
// open and the inventory on NATS, checks it, and returns it and its recent events.
func statusJSONWithEvents(t *testing.T, d *daemonUnderTest, natsAddr string) (string, []recentEvent) {
	var st struct {
		NATS struct {
			URL       string `json:"url"`
			Connected bool   `json:"connected"`
		} `json:"nats"`
		Controllers []struct {
			State  string `json:"state"`
			Events struct {
				Published uint64        `json:"published"`
				Subject   string        `json:"subject"`
				Recent    []recentEvent `json:"recent"`
			} `json:"events"`
			Inventory struct {
				VMs  int `json:"vms"`
				Push struct {
					Mode string `json:"mode"`
				} `json:"push"`
				KV struct {
					Bucket string `json:"bucket"`
					Keys   int    `json:"keys"`
				} `json:"kv"`
			} `json:"inventory"`
		} `json:"controllers"`
	}
	var js string
	testutil.Eventually(t, 15*time.Second, func() bool {
		_, js = d.get(t, "/?format=json")
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, js)
		}
		return len(st.Controllers) == 1 && st.Controllers[0].Events.Published >= 30 &&
			st.Controllers[0].Inventory.Push.Mode == "push" && st.Controllers[0].Inventory.KV.Keys > st.Controllers[0].Inventory.VMs
	}, "30 events published, the push channel open and the inventory on NATS")
	c := st.Controllers[0]
	if c.Inventory.KV.Bucket != "VEIL_INVENTORY" {
		t.Errorf("inventory bucket %q", c.Inventory.KV.Bucket)
	}
	if c.State != "up" || !st.NATS.Connected || c.Events.Subject != "veil.events.alpha.>" || len(c.Events.Recent) == 0 {
		t.Errorf("json status: %s", js)
	}
	if want := "nats://xxxxx@" + natsAddr; !strings.HasPrefix(st.NATS.URL, "nats://") || !strings.HasSuffix(st.NATS.URL, want) || strings.Contains(st.NATS.URL, "veil@") {
		t.Errorf("nats url %q, want the list ending in %s", st.NATS.URL, want)
	}
	return js, c.Events.Recent
}

// statusPageWithEvents checks that the page, taken after the JSON, has every section and the
// oldest half of the JSON's recent events, and returns it.
func statusPageWithEvents(t *testing.T, d *daemonUnderTest, recent []recentEvent) string {
	code, page := d.get(t, "/")
	if code != 200 {
		t.Fatalf("status page: %d", code)
	}
	for _, want := range []string{"<h2>NATS</h2>", "<caption>Inventory</caption>", "<caption>Collectors</caption>",
		"<caption>Guest checks</caption>", "<caption>Events</caption>", "<caption>Recent events</caption>",
		`<h2>alpha <span class="badge ok">up</span>`, "<code>veil.events.alpha.&gt;</code>", `<span class="badge ok">connected</span>`,
		"<td>domains</td>", "eligible VMs", `<th>Kept fresh by</th><td><span class="badge ok">push</span>`, "<code>VEIL_INVENTORY</code>", "<td>push</td>", "<td>inventory_kv</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %s", want)
		}
	}
	// Every event the page lists is at least as old as the JSON's: the oldest few of the JSON's
	// list are still on the page.
	for _, r := range recent[len(recent)/2:] {
		if !strings.Contains(page, "<code>"+r.ID+"</code>") || !strings.Contains(page, "<code>"+r.Subject+"</code>") {
			t.Errorf("recent event %s (%s) not on the page", r.ID, r.Subject)
		}
		if r.Message == "" || !strings.Contains(page, "<td>"+template.HTMLEscapeString(r.Message)+"</td>") {
			t.Errorf("recent event %s: message %q not on the page", r.ID, r.Message)
		}
	}
	return page
}

// logsNameTheirComponent: one key scheme: every line names its component; those of a
// controller's parts name it; no scrape failed in part.
func logsNameTheirComponent(t *testing.T, d *daemonUnderTest) {
	if strings.Contains(d.logs.String(), "error gathering metrics") {
		t.Errorf("a scrape failed in part:\n%s", d.logs.String())
	}
	perController := map[string]bool{"inventory": true, "guest": true, "events": true}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(d.logs.String()), "\n") {
		m := regexp.MustCompile(` component=(\S+)`).FindStringSubmatch(line)
		if m == nil {
			t.Errorf("log line without component: %s", line)
			continue
		}
		seen[m[1]] = true
		if perController[m[1]] && !strings.Contains(line, " controller=alpha") {
			t.Errorf("%s log line without controller: %s", m[1], line)
		}
	}
	for _, c := range []string{"daemon", "web", "inventory", "nats"} {
		if !seen[c] {
			t.Errorf("no log line of component %s:\n%s", c, d.logs.String())
		}
	}
}
