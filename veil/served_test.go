package veil

// ServedAt: the controller's clock as the Date header of its last answer gives it, whatever the
// status, so that the forwarder dates what may still appear in the journal by it.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestServedAtIsTheLastAnswersDate(t *testing.T) {
	dates := []string{"Tue, 01 Dec 2026 11:00:07 GMT", "Tue, 01 Dec 2026 10:59:58 GMT"} // the second stepped back
	status := []int{http.StatusOK, http.StatusNotFound}
	var at atomic.Int64 // the answer to give
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := at.Load()
		w.Header().Set("Date", dates[i])
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status[i])
		_, _ = w.Write([]byte(`{"version":"4.1.5"}`))
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, Token: "t", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ServedAt(); !got.IsZero() {
		t.Fatalf("ServedAt before any answer: %s, want zero", got)
	}
	for i := range dates {
		at.Store(int64(i))
		_, _ = c.ControllerVersion(context.Background())
		want, _ := http.ParseTime(dates[i])
		if got := c.ServedAt(); !got.Equal(want) {
			t.Errorf("after an answer dated %s (status %d): ServedAt %s", dates[i], status[i], got)
		}
	}
}
