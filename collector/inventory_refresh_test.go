// Refresh-cycle tests of the inventory: failures and recovery, what is logged and when, token
// rotation, task counting across refreshes, and readers that never wait for a refresh.

package collector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestBrokenControllerKeepsLastData proves that a refresh failing in any of the ways a
// controller or a proxy in front of it fails keeps the last good data, reports veil_up 0
// and collector success 0, and that the next good refresh recovers by itself.
func TestBrokenControllerKeepsLastData(t *testing.T) {
	tests := []struct {
		name  string
		fault veiltest.Fault
	}{
		{"answers 500", veiltest.Fault{Path: "/api/domains/*", Kind: "status", Status: 500}},
		{"answers a proxy's HTML page", veiltest.Fault{Path: "/api/domains/*", Kind: "html"}},
		{"answers truncated JSON", veiltest.Fault{Path: "/api/domains/*", Kind: "truncated"}},
		{"is down (connection reset)", veiltest.Fault{Path: "/api/domains/*", Kind: "reset"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, smallInventory, testCollect(), veil.Config{})
			f.mustRefresh(t)
			before := series(t, f.inv, "veil_domain_")
			f.sim.SetFaults(tt.fault)
			if err := f.refresh(t); err == nil {
				t.Fatal("refresh succeeded against a broken controller")
			}
			if v := value(t, f.inv, "veil_up"); v != "0" {
				t.Errorf("veil_up = %s, want 0", v)
			}
			if r := runOf(t, f.inv, collDomains); r.Success || r.Unavailable || r.Error == "" {
				t.Errorf("domains run %+v, want a failure (not unavailable) with its error", r)
			}
			if r := runOf(t, f.inv, collNodes); !r.Success {
				t.Errorf("nodes run %+v, want a success: one failing collection must not fail the others", r)
			}
			if after := series(t, f.inv, "veil_domain_"); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("last good domain data not kept:\nbefore %q\nafter %q", before, after)
			}
			if st := f.inv.Status(); st.Up || st.LastError == "" {
				t.Errorf("status = up %v, error %q", st.Up, st.LastError)
			}
			f.sim.ClearFaults()
			f.mustRefresh(t)
			if v := value(t, f.inv, "veil_up"); v != "1" {
				t.Errorf("veil_up = %s after recovery, want 1", v)
			}
			logs := f.logs.String()
			if strings.Count(logs, "controller down") != 1 || strings.Count(logs, "controller back up") != 1 {
				t.Errorf("want one line per state change, logs:\n%s", logs)
			}
		})
	}
}

func TestStateChangesAreLoggedOnce(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	f.sim.SetFaults(veiltest.Fault{Kind: "status", Status: 503})
	for range 3 {
		if err := f.refresh(t); err == nil {
			t.Fatal("refresh succeeded")
		}
	}
	if n := strings.Count(f.logs.String(), "\n"); n != 2 { // first refresh done + down
		t.Errorf("want 2 log lines after 3 failed refreshes, got %d:\n%s", n, f.logs.String())
	}
}

func TestSecondControllerIsUnaffected(t *testing.T) {
	a := newFixture(t, smallInventory, testCollect(), veil.Config{})
	bopts := smallInventory
	bopts.Seed = 8
	b := newFixture(t, bopts, testCollect(), veil.Config{})
	a.mustRefresh(t)
	b.mustRefresh(t)
	a.sim.SetFaults(veiltest.Fault{Kind: "status", Status: 500})
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); errA = a.refresh(t) }()
	go func() { defer wg.Done(); errB = b.refresh(t) }()
	wg.Wait()
	if errA == nil {
		t.Error("broken controller refreshed fine")
	}
	if errB != nil {
		t.Errorf("healthy controller failed: %v", errB)
	}
	if v := value(t, b.inv, "veil_up"); v != "1" {
		t.Errorf("healthy controller veil_up = %s", v)
	}
}

func TestInventorySendsOnlyGETs(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 1, VMs: 250, Nodes: 5}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	f.mustRefresh(t)
	reqs := f.sim.Requests()
	if len(reqs) == 0 {
		t.Fatal("the simulator logged no request")
	}
	for _, r := range reqs {
		if r.Method != "GET" {
			t.Errorf("inventory sent %s %s", r.Method, r.Path)
		}
	}
	if got := f.inv.Status().Domains; got != 250 {
		t.Errorf("paged domains = %d, want 250", got)
	}
}

// TestTokenRotationRecovers: a 401 sets veil_up 0 with a message naming the controller, and
// writing the right token into the token file is enough to recover.
func TestTokenRotationRecovers(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("jwt wrong-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, veiltest.Options{Seed: 2, Token: "right-token-s3cr3t", VMs: 3}, testCollect(), veil.Config{TokenFile: tokenFile})
	if err := f.refresh(t); err == nil {
		t.Fatal("refresh with a wrong token succeeded")
	}
	st := f.inv.Status()
	if st.Up || !st.AuthFailed || !strings.Contains(st.LastError, "controller test") || !strings.Contains(st.LastError, "401") {
		t.Errorf("status after 401: %+v", st)
	}
	if v := value(t, f.inv, "veil_up"); v != "0" {
		t.Errorf("veil_up = %s", v)
	}
	if err := os.WriteFile(tokenFile, []byte("right-token-s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	if v := value(t, f.inv, "veil_up"); v != "1" {
		t.Errorf("veil_up = %s after rotating the token file", v)
	}
	if strings.Contains(f.logs.String(), "s3cr3t") {
		t.Errorf("token in logs: %s", f.logs.String())
	}
	if s := series(t, f.inv, "s3cr3t"); len(s) != 0 {
		t.Errorf("token in metrics: %q", s)
	}
	if strings.Count(f.logs.String(), "rejected the token") != 1 {
		t.Errorf("want one log line for the 401, logs:\n%s", f.logs.String())
	}
}

func TestTasksSeenFinishingAreCountedOnce(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 4, VMs: 5, InitialTasks: 30, TaskDuration: 50 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	if s := series(t, f.inv, "veil_tasks_finished_total"); len(s) != 0 {
		t.Fatalf("history before the start was counted: %q", s)
	}
	ids := f.sim.DomainIDs()
	startAndWait(t, f, ids[0])
	startAndWait(t, f, ids[1])
	f.mustRefresh(t)
	f.mustRefresh(t) // a second look at the same tasks must not count them again
	total := 0.0
	for _, s := range series(t, f.inv, "veil_tasks_finished_total") {
		var v float64
		if _, err := fmtSscan(s[strings.LastIndexByte(s, ' ')+1:], &v); err != nil {
			t.Fatal(err)
		}
		total += v
	}
	if total != 2 {
		t.Errorf("finished tasks counted %v, want 2: %q", total, series(t, f.inv, "veil_tasks_finished_total"))
	}
	if v := value(t, f.inv, "veil_task_duration_seconds_count"); v != "2" && len(series(t, f.inv, "veil_task_duration_seconds_count")) == 1 {
		t.Errorf("duration histogram count = %s, want 2", v)
	}
}

// TestTaskTrackerCountsTasksThatWereRunning: a task seen running is counted when it ends, even
// though newer finished tasks moved on in between.
func TestTaskTrackerCountsTasksThatWereRunning(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 5, VMs: 5, InitialTasks: 3, TaskDuration: 700 * time.Millisecond}, testCollect(), veil.Config{})
	f.mustRefresh(t)
	c, err := veilops.New(f.sim.URL, f.sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := f.sim.DomainIDs()
	startAndWait(t, f, ids[0])
	env, err := c.ShutdownDomain(ctx, ids[1], true) // the client sends ?async=1: the task runs on
	if err != nil {
		env, err = c.StartDomain(ctx, ids[1], false)
	}
	if err != nil {
		t.Fatal(err)
	}
	long := env.Task.ID
	f.mustRefresh(t) // sees `long` running
	if _, err := c.WaitTask(ctx, long, 20*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	f.mustRefresh(t)
	f.mustRefresh(t)
	total := 0.0
	for _, s := range series(t, f.inv, "veil_tasks_finished_total") {
		var v float64
		fmtSscan(s[strings.LastIndexByte(s, ' ')+1:], &v)
		total += v
	}
	if total != 2 {
		t.Errorf("counted %v finished tasks, want 2", total)
	}
}

// TestReadersDoNotWaitForARefresh: while a refresh waits for a slow controller, a scrape, the
// status page and the guest checker's Domains read the previous snapshot at once. The proof
// does not time anything: every reader returns while no request of the refresh has been
// answered yet (the simulator logs a request when it answers, after its 1 s latency).
func TestReadersDoNotWaitForARefresh(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	f.mustRefresh(t)
	f.rendered(t) // Ready: the first refresh is rendered
	wantSeries := testutil.CollectAndCount(f.inv)
	// The handlers of the first refresh may still be returning: start from none in flight.
	tu.Eventually(t, 10*time.Second, func() bool {
		f.sim.ResetRequests()
		return f.sim.InFlightMax() == 0
	}, "the simulator to go idle")
	f.sim.SetLatency(time.Second, 0)

	refreshed := make(chan error, 1)
	go func() { refreshed <- f.refresh(t) }()
	tu.Eventually(t, 10*time.Second, func() bool { return f.sim.InFlightMax() > 0 }, "a request of the refresh in flight")

	readers := []struct {
		name string
		read func() error
	}{
		{"Collect", func() error {
			if n := testutil.CollectAndCount(f.inv); n != wantSeries {
				return fmt.Errorf("%d series, want the previous snapshot's %d", n, wantSeries)
			}
			return nil
		}},
		{"Status", func() error {
			if st := f.inv.Status(); !st.Ready || !st.Up || st.Domains != 3 {
				return fmt.Errorf("status %+v, want the previous snapshot", st)
			}
			return nil
		}},
		{"Domains", func() error {
			if n := len(f.inv.Domains()); n != 3 {
				return fmt.Errorf("%d domains, want 3", n)
			}
			return nil
		}},
		{"Ready", func() error {
			if !f.inv.Ready() {
				return fmt.Errorf("not ready")
			}
			return nil
		}},
	}
	for _, r := range readers {
		if err := r.read(); err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
		if answered := len(f.sim.Requests()); answered != 0 {
			t.Errorf("%s returned only after %d requests of the refresh were answered: it waited for the refresh", r.name, answered)
		}
	}
	select {
	case err := <-refreshed:
		t.Fatalf("the refresh finished before the readers were checked (err %v): the test proves nothing", err)
	default:
	}
	if err := <-refreshed; err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if len(f.sim.Requests()) == 0 {
		t.Error("the refresh finished without an answered request")
	}
}

// TestConcurrentRefreshesAreSafe: two refreshes at once (Run and a caller) leave a consistent
// snapshot and the race detector quiet.
func TestConcurrentRefreshesAreSafe(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- f.refresh(t) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("refresh: %v", err)
		}
	}
	if st := f.inv.Status(); !st.Up || st.Domains != 3 || st.Nodes != 2 {
		t.Errorf("status after concurrent refreshes: %+v", st)
	}
}

// TestRefreshLogsOnlyStateChanges: a controller that keeps rejecting the token or keeps
// failing is logged once when it starts and once when it recovers, not at every refresh.
func TestRefreshLogsOnlyStateChanges(t *testing.T) {
	const (
		first  = "first inventory refresh done"
		token  = "rejected the token"
		down   = "controller down"
		backUp = "controller back up"
	)
	tests := []struct {
		name  string
		steps []string // ok, auth (401), forbidden (403), down (503)
		want  []string // the log lines in order, by a substring
	}{
		{"token keeps failing", []string{"ok", "auth", "auth", "auth", "ok"}, []string{first, token, backUp}},
		{"token fails from the start", []string{"auth", "auth", "ok", "ok"}, []string{token, backUp}},
		{"403 keeps failing", []string{"ok", "forbidden", "forbidden", "ok"}, []string{first, token, backUp}},
		{"controller stays down", []string{"ok", "down", "down", "down", "ok", "ok"}, []string{first, down, backUp}},
		{"down then token", []string{"ok", "down", "auth", "auth", "down", "ok"}, []string{first, down, token, down, backUp}},
		{"first refresh fails", []string{"down", "down", "ok"}, []string{down, backUp}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, smallInventory, testCollect(), veil.Config{})
			for i, step := range tt.steps {
				switch step {
				case "ok":
					f.sim.ClearFaults()
				case "auth":
					f.sim.SetFaults(veiltest.Fault{Kind: "status", Status: 401})
				case "forbidden":
					f.sim.SetFaults(veiltest.Fault{Kind: "status", Status: 403})
				case "down":
					f.sim.SetFaults(veiltest.Fault{Kind: "status", Status: 503})
				}
				if err := f.refresh(t); (err == nil) != (step == "ok") {
					t.Fatalf("step %d (%s): refresh error %v", i, step, err)
				}
			}
			lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("want %d log lines %q, got %d:\n%s", len(tt.want), tt.want, len(lines), f.logs.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d = %q, want %q", i, lines[i], w)
				}
			}
		})
	}
}

// TestDomainsGenerationFollowsSuccessfulReads: the guest checker recomputes its schedule only
// when the generation grows, so it must grow on every successful read of the domains (even when
// nothing changed: a read is news) and never on a failed one (the last list is kept).
func TestDomainsGenerationFollowsSuccessfulReads(t *testing.T) {
	f := newFixture(t, smallInventory, testCollect(), veil.Config{})
	if d, gen := f.inv.DomainsGen(); gen != 0 || d != nil {
		t.Fatalf("before the first read: %d domains, generation %d; want none, 0", len(d), gen)
	}
	f.mustRefresh(t)
	d1, g1 := f.inv.DomainsGen()
	if g1 == 0 || len(d1) == 0 {
		t.Fatalf("after a read: %d domains, generation %d; want some, > 0", len(d1), g1)
	}
	f.sim.SetFaults(veiltest.Fault{Path: "/api/domains/*", Kind: "status", Status: 500})
	if err := f.refresh(t); err == nil {
		t.Fatal("refresh succeeded against a broken domains collection")
	}
	if d, g := f.inv.DomainsGen(); g != g1 || len(d) != len(d1) {
		t.Errorf("after a failed read: %d domains, generation %d; want the last list (%d) and generation %d", len(d), g, len(d1), g1)
	}
	f.sim.ClearFaults()
	f.mustRefresh(t)
	if _, g := f.inv.DomainsGen(); g <= g1 {
		t.Errorf("after the next successful read: generation %d, want > %d", g, g1)
	}
}
