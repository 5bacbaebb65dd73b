package exposition

import (
	"net/http"
	"net/http/httptest"
	"strconv"
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
		built <- b.Finish(nil)
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
