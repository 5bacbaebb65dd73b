package inventory

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// recorder is an Observer that keeps what it was told, in order.
type recorder struct {
	mu  sync.Mutex
	log []string // "listed <class> <id>=<name>,..." or "pushed <class> <id>=<name>"
}

// TestApplyWhileListingIsReplayed: a frame applied while a refresh lists the domains is
// applied again over the refresh's result, so a listing older than the push does not undo it.
func TestApplyWhileListingIsReplayed(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 11, VMs: 2}, pushCollect(), veil.Config{})
	f.mustRefresh(t)
	vm := f.sim.DomainIDs()[0]
	old := f.inv.Domains()
	f.inv.mu.Lock()
	f.inv.pacing.listing = true // a refresh has started listing
	f.inv.mu.Unlock()
	obj, _ := json.Marshal(map[string]any{"id": vm, "verbose_name": "pushed-name", "status": "ACTIVE"})
	if drops := f.inv.Apply([]veil.PushFrame{{Resource: "/domains/", Event: veil.PushUpdated, ID: vm, Object: obj}}); len(drops) != 0 {
		t.Fatalf("dropped %v", drops)
	}
	// The refresh stores the listing it read before the push.
	r := &refresh{s: f.inv, start: time.Now(), finished: time.Now(),
		done:  []collected{{name: collDomains, set: func(s *Snapshot) { s.Domains = NewVMs(old) }}},
		fails: []failure{failNone}}
	r.store()
	if d, _ := domainOf(f.inv, vm); d.VerboseName != "pushed-name" {
		t.Errorf("after the refresh the VM is named %q: the older listing undid the push", d.VerboseName)
	}
	if f.inv.pacing.listing || len(f.inv.pacing.replay) != 0 {
		t.Error("the replay was not cleared")
	}
}

// TestASilentSocketIsReplaced: a controller that accepts the socket and then neither sends nor
// answers pings (a half-open connection) is found out by the ping and connected to again, each
// connect followed by a full listing.
func TestASilentSocketIsReplaced(t *testing.T) {
	shortPushPing(t, 200*time.Millisecond)
	sim := veiltest.New(veiltest.Options{Seed: 12, VMs: 2, NoPush: true})
	t.Cleanup(sim.Close)
	var conns atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		conns.Add(1)
		<-r.Context().Done() // never reads: pings stay unanswered
	})
	f := withPushChannel(t, sim, mux)
	logs := f.logs
	feed := runFeed(t, f)
	tu.Eventually(t, 20*time.Second, func() bool { return conns.Load() >= 3 }, "the silent socket replaced")
	// Never served, the socket never counted as open: no listing of its own, said once.
	if n := testutil.ToFloat64(metricOf(t, feed, "veil_push_connects_total", "")); n != 0 {
		t.Errorf("veil_push_connects_total = %v for sockets that never answered", n)
	}
	if n := strings.Count(logs.String(), "push channel lost"); n != 1 {
		t.Errorf("the unserved socket was said %d times, want once:\n%s", n, logs.String())
	}
}

// TestARefusedTokenIsSaidOnce: a controller that accepts the socket and refuses the token in its
// first frame (as the real one does) is retried without the channel counting as open: one
// warning for all the attempts, no "open again", no listing per attempt.
func TestARefusedTokenIsSaidOnce(t *testing.T) {
	shortPushBackoff(t, 50*time.Millisecond)
	sim := veiltest.New(veiltest.Options{Seed: 15, VMs: 2})
	t.Cleanup(sim.Close)
	var tries atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		r.URL.RawQuery = "token=revoked" // the REST token still works: only the socket refuses it
		sim.Handler().ServeHTTP(w, r)
	})
	f := withPushChannel(t, sim, mux)
	feed := runFeed(t, f)
	tu.Eventually(t, 20*time.Second, func() bool { return tries.Load() >= 5 && f.inv.Ready() }, "five attempts and the inventory listed")
	logs := f.logs.String()
	if n := strings.Count(logs, "push channel lost"); n != 1 {
		t.Errorf("the refused socket was said %d times, want once:\n%s", n, logs)
	}
	if strings.Contains(logs, "push channel open") {
		t.Errorf("a refused socket was said to be open:\n%s", logs)
	}
	if !strings.Contains(logs, "token refused") {
		t.Errorf("the warning does not say the token was refused:\n%s", logs)
	}
	if n := testutil.ToFloat64(metricOf(t, feed, "veil_push_connects_total", "")); n != 0 {
		t.Errorf("veil_push_connects_total = %v for refused sockets", n)
	}
	if st := feed.Status(); st.Mode != PushModeConnecting || !st.ConnectedSince.IsZero() {
		t.Errorf("feed status %+v, want connecting and no open socket", st)
	}
}

// TestTheObserverNeverSeesAnOlderState: a frame applied while a listing runs reaches the
// observer at once, and the listing it gets afterwards has the frame folded in (a VM renamed by
// the push keeps its new name; one deleted by the push is not listed), so an observer never
// sees an object go back to what an older page said.
func TestTheObserverNeverSeesAnOlderState(t *testing.T) {
	f := newFixture(t, veiltest.Options{Seed: 13, VMs: 3}, pushCollect(), veil.Config{})
	rec := &recorder{}
	f.inv.SetObserver(rec)
	f.mustRefresh(t)
	ids := f.sim.DomainIDs()
	f.inv.mu.Lock()
	f.inv.pacing.listing = true // a refresh is listing
	f.inv.mu.Unlock()
	obj, _ := json.Marshal(map[string]any{"id": ids[0], "verbose_name": "pushed-name", "status": "ACTIVE"})
	f.inv.Apply([]veil.PushFrame{
		{Resource: "/domains/", Event: veil.PushUpdated, ID: ids[0], Object: obj},
		{Resource: "/domains/", Event: veil.PushDeleted, ID: ids[1]},
	})
	// The refresh stores what it listed before the frames.
	old := make([]RawObject, 0, len(ids))
	for _, id := range ids {
		o, _ := json.Marshal(map[string]any{"id": id, "verbose_name": "listed-" + id[:4]})
		old = append(old, RawObject{ID: id, JSON: o})
	}
	r := &refresh{s: f.inv, start: time.Now(), finished: time.Now(),
		done: []collected{{name: collDomains, set: func(*Snapshot) {
			f.inv.observing.keepListing(ClassDomain, old)
		}}},
		fails: []failure{failNone}}
	rec.mu.Lock()
	rec.log = nil
	rec.mu.Unlock()
	r.store()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.log) != 1 {
		t.Fatalf("the observer was told %d things after the listing, want the listing: %q", len(rec.log), rec.log)
	}
	got := rec.log[0]
	if !strings.Contains(got, ids[0]+"=pushed-name") || strings.Contains(got, ids[1]+"=") || !strings.Contains(got, ids[2]+"=listed-") {
		t.Errorf("the listing told: %s\nwant %s renamed by the push, %s gone, %s as listed", got, ids[0], ids[1], ids[2])
	}
}

func name(raw json.RawMessage) string {
	var o struct {
		Name string `json:"verbose_name"`
	}
	json.Unmarshal(raw, &o)
	return o.Name
}

func (r *recorder) Listed(class string, objs []RawObject) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, o := range objs {
		parts = append(parts, o.ID+"="+name(o.JSON))
	}
	sort.Strings(parts)
	r.log = append(r.log, "listed "+class+" "+strings.Join(parts, ","))
}

func (r *recorder) Pushed(class string, o RawObject, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("pushed %s %s=%s deleted=%v", class, o.ID, name(o.JSON), deleted))
}

// TestTheFirstListingWaitsForThePushChannel: with a push channel, the first refresh waits for
// its first dial, so that it lists with the socket open; a listing begun before would be
// listed again at once when the socket opens (60 controllers on a slow machine listed
// everything twice at start, and cut-off listings never ended).
func TestTheFirstListingWaitsForThePushChannel(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 14, VMs: 5})
	t.Cleanup(sim.Close)
	var mu sync.Mutex
	var accepted time.Time
	var listed []time.Time
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // a controller slow to open the socket
		mu.Lock()
		if accepted.IsZero() {
			accepted = time.Now()
		}
		mu.Unlock()
		sim.Handler().ServeHTTP(w, r)
	})
	mux.HandleFunc("/api/domains/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/domains/" {
			mu.Lock()
			listed = append(listed, time.Now())
			mu.Unlock()
		}
		sim.Handler().ServeHTTP(w, r)
	})
	f := withPushChannel(t, sim, mux)
	feed := runFeed(t, f)
	tu.Eventually(t, 20*time.Second, func() bool {
		return f.inv.Ready() && !feed.Status().ConnectedSince.IsZero()
	}, "the first refresh done and the socket open")
	mu.Lock()
	defer mu.Unlock()
	if len(listed) == 0 {
		t.Fatal("the domains were never listed")
	}
	for _, at := range listed {
		if at.Before(accepted) {
			t.Errorf("the domains were listed %v before the socket was opened", accepted.Sub(at).Round(time.Millisecond))
		}
	}
}

func TestRefreshLimit(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		full     bool
		want     time.Duration
	}{
		{5 * time.Second, true, time.Minute}, {30 * time.Second, true, 90 * time.Second},
		{5 * time.Second, false, 15 * time.Second}, {30 * time.Second, false, 90 * time.Second},
	} {
		if got := RefreshLimit(tc.interval, tc.full); got != tc.want {
			t.Errorf("RefreshLimit(%v, %v) = %v, want %v", tc.interval, tc.full, got, tc.want)
		}
	}
}
