package inventory

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	dto "github.com/prometheus/client_model/go"

	"github.com/veil-exporter/veil-exporter/config"
	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// fixture is a store of a simulator's controller. The client does not retry, so a fault shows
// in one refresh.
type fixture struct {
	sim  *veiltest.Server
	inv  *Store
	logs *tu.SyncBuffer
}

func newFixture(t *testing.T, opts veiltest.Options, cc config.Collect, vc veil.Config) *fixture {
	t.Helper()
	sim := veiltest.New(opts)
	t.Cleanup(sim.Close)
	f := &fixture{sim: sim, logs: &tu.SyncBuffer{}}
	vc.URL, vc.Token, vc.MaxRetries = sim.URL, sim.Token, -1
	client, err := veil.New(vc)
	if err != nil {
		t.Fatal(err)
	}
	if f.inv, err = NewStore("test", client, cc, log.NewLogfmtLogger(f.logs)); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) mustRefresh(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.inv.Refresh(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
}

// TestSnapshotsAreImmutableAndSignalled: each refresh and each pushed batch stores a new
// snapshot with a higher generation and closes the previous one's Changed; a snapshot taken
// before keeps what it held.
func TestSnapshotsAreImmutableAndSignalled(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 5, VMs: 3}, pushCollect(), veil.Config{})
	first := f.inv.Snapshot()
	if first.Refreshed || first.Domains.Len() != 0 {
		t.Fatalf("the first snapshot holds a refresh: %+v", first)
	}
	f.mustRefresh(t)
	select {
	case <-first.Changed():
	default:
		t.Fatal("the refresh did not close the previous snapshot's Changed")
	}
	listed := f.inv.Snapshot()
	if listed.Gen <= first.Gen || !listed.Refreshed || !listed.Up || listed.Domains.Len() != 3 || first.Domains.Len() != 0 {
		t.Fatalf("after a refresh: gen %d (was %d), refreshed %v, %d VMs (the first snapshot %d)", listed.Gen, first.Gen, listed.Refreshed, listed.Domains.Len(), first.Domains.Len())
	}
	vm := listed.Domains.At(0)
	obj, _ := json.Marshal(map[string]any{"id": vm.ID, "verbose_name": "pushed-name", "status": "ACTIVE"})
	f.inv.Apply([]veil.PushFrame{{Resource: "/domains/", Event: veil.PushUpdated, ID: vm.ID, Object: obj}})
	pushed := f.inv.Snapshot()
	select {
	case <-listed.Changed():
	default:
		t.Fatal("the pushed batch did not close the previous snapshot's Changed")
	}
	if pushed.Gen != listed.Gen+1 || pushed.Applied != listed.Applied+1 || listed.Domains.At(0).VerboseName != vm.VerboseName {
		t.Errorf("after a push: gen %d (was %d), applied %d (was %d), the older snapshot's VM named %q (was %q)",
			pushed.Gen, listed.Gen, pushed.Applied, listed.Applied, listed.Domains.At(0).VerboseName, vm.VerboseName)
	}
	if f.inv.Apply([]veil.PushFrame{{Resource: "/galaxies/", Event: veil.PushUpdated, ID: "g"}}); f.inv.Snapshot() != pushed {
		t.Error("a batch of dropped frames stored a snapshot")
	}
}

// metricOf picks the one metric of c of that name with the label name="value" ("": any).
func metricOf(t *testing.T, c prometheus.Collector, name, label string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	go func() { c.Collect(ch); close(ch) }()
	var found prometheus.Metric
	for m := range ch {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) && (label == "" || hasLabel(t, m, label)) {
			found = m
		}
	}
	if found == nil {
		t.Fatalf("no %s{%s}", name, label)
	}
	return constCollector{found}
}

func hasLabel(t *testing.T, m prometheus.Metric, label string) bool {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	for _, want := range strings.Split(label, ",") { // each of name="value",...
		if !slices.ContainsFunc(d.Label, func(l *dto.LabelPair) bool { return l.GetName()+`="`+l.GetValue()+`"` == want }) {
			return false
		}
	}
	return true
}

// withPushChannel is an inventory of a controller whose /ws/ is mux's and whose REST API is
// the simulator's.
func withPushChannel(t *testing.T, sim *veiltest.Server, mux *http.ServeMux) *fixture {
	t.Helper()
	mux.Handle("/", sim.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	logs := &tu.SyncBuffer{}
	client, err := veil.New(veil.Config{URL: srv.URL, Token: sim.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := NewStore("test", client, pushCollect(), log.NewLogfmtLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{sim: sim, inv: inv, logs: logs}
}

// runFeed starts the inventory's loop and its push feed until the test ends.
func runFeed(t *testing.T, f *fixture) *PushFeed {
	t.Helper()
	feed := NewPushFeed("test", f.inv.client, f.inv, time.Hour, log.NewLogfmtLogger(f.logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { f.inv.Run(ctx); done <- struct{}{} }()
	go func() { feed.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return feed
}

func domainOf(inv *Store, id string) (veil.Domain, bool) {
	for _, d := range inv.Domains() {
		if d.ID == id {
			return *d, true
		}
	}
	return veil.Domain{}, false
}

// pushCollect polls only every hour: what the inventory learns within a test came by the push
// (or by the refresh that follows each connect).
func pushCollect() (c config.Collect) {
	c = config.Default().Collect
	c.Interval, c.ResyncInterval = time.Hour, time.Hour
	return c
}

type constCollector struct{ m prometheus.Metric }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.Desc() }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }
