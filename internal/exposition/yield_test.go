package exposition

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// TestRenderYieldsToScrapes: a render that reaches a yield point while a scrape is being
// served waits for it, goes on once the scrape is done, and counts the wait (Waited).
func TestRenderYieldsToScrapes(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	rd := NewRenderer()
	h := Handler(HandlerOpts{Live: prometheus.NewRegistry(), Sets: func() []*Set { return nil }, Fallback: slow, Renderer: rd})
	served := make(chan struct{})
	go func() {
		defer close(served)
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	<-entered
	before := pauses(rd)

	d := NewDesc("render_yields_series", "A family with more series than a render adds between yields.", prometheus.GaugeValue, []string{"n"}, nil)
	b := Builder{gate: &rd.scrapes}
	built := make(chan *Set)
	go func() {
		for i := range 2 * yieldEvery {
			b.Add(d, float64(i), strconv.Itoa(i))
		}
		built <- b.Finish()
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return pauses(rd) > before }, "the render waits for the scrape in flight")
	close(release)
	<-served
	select {
	case set := <-built:
		if len(set.Families) != 1 {
			t.Fatalf("render: %d families, want 1", len(set.Families))
		}
		// What a render waited is not its cost: the guest checker paces renders by the rest.
		if b.Waited() <= 0 {
			t.Errorf("Waited %v after a pause for a scrape, want > 0", b.Waited())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the render did not go on after the scrape")
	}
}

func pauses(rd *Renderer) int64 {
	rd.scrapes.mu.Lock()
	defer rd.scrapes.mu.Unlock()
	return rd.scrapes.paused
}

// blockedWriter is a client that stops reading: its first Write blocks until released.
type blockedWriter struct {
	*httptest.ResponseRecorder
	once             sync.Once
	writing, release chan struct{}
}

func (b *blockedWriter) Write(p []byte) (int, error) {
	b.once.Do(func() {
		close(b.writing)
		<-b.release
	})
	return b.ResponseRecorder.Write(p)
}

// TestScrapeWaitingOnClientHoldsNothing: while a scrape is blocked writing to its client, it
// neither pauses renders (the gate counts no scrape) nor holds its place under
// MaxRequestsInFlight (another scrape is served, not refused).
func TestScrapeWaitingOnClientHoldsNothing(t *testing.T) {
	rd := NewRenderer()
	live := prometheus.NewRegistry()
	live.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "stalled_test", Help: "Something to write."}))
	h := Handler(HandlerOpts{Live: live, Sets: func() []*Set { return nil }, Fallback: http.NotFoundHandler(),
		Renderer: rd, MaxRequestsInFlight: 1})
	stalled := &blockedWriter{ResponseRecorder: httptest.NewRecorder(), writing: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(stalled, httptest.NewRequest("GET", "/metrics", nil))
	}()
	select {
	case <-stalled.writing:
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape never wrote")
	}
	rd.scrapes.mu.Lock()
	inFlight := rd.scrapes.n
	rd.scrapes.mu.Unlock()
	if inFlight != 0 {
		t.Errorf("renders wait for %d scrapes while the only one waits on its client", inFlight)
	}
	other := httptest.NewRecorder()
	h.ServeHTTP(other, httptest.NewRequest("GET", "/metrics", nil))
	if other.Code != http.StatusOK {
		t.Errorf("a scrape beside one waiting on its client = %d, want 200: %s", other.Code, other.Body)
	}
	close(stalled.release)
	<-done
	if stalled.Code != http.StatusOK {
		t.Errorf("the stalled scrape = %d once its client read again", stalled.Code)
	}
}
