package collector

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestOneOddVMIsRejectedTheOthersExported: the controller lists one VM whose memory_count is
// "n/a" (as a platform upgrade can bring) among good ones. The refresh succeeds, every other VM
// is exported, the odd one is counted in veil_objects_rejected_total and said once, however
// many refreshes see it.
func TestOneOddVMIsRejectedTheOthersExported(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 11, Nodes: 2, VMs: 30, Templates: -1})
	t.Cleanup(sim.Close)
	odd := sim.DomainIDs()[3]
	mux := http.NewServeMux()
	mux.HandleFunc("/api/domains/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/domains/" {
			sim.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		sim.Handler().ServeHTTP(rec, r)
		var page map[string]json.RawMessage
		var results []map[string]json.RawMessage
		if json.Unmarshal(rec.Body.Bytes(), &page) != nil || json.Unmarshal(page["results"], &results) != nil {
			t.Errorf("not a page: %s", rec.Body.Bytes())
			return
		}
		for _, d := range results {
			if bytes.Equal(d["id"], []byte(`"`+odd+`"`)) {
				d["memory_count"] = json.RawMessage(`"n/a"`)
			}
		}
		page["results"], _ = json.Marshal(results)
		b, _ := json.Marshal(page)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	mux.Handle("/", sim.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	logs := &tu.SyncBuffer{}
	api := NewAPIMetrics("test", log.NewLogfmtLogger(logs))
	client, err := veil.New(veil.Config{URL: srv.URL, Token: sim.Token, MaxRetries: -1, Observer: api.Observe, Rejected: api.Rejected})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := newTestInventory(client, testCollect(), log.NewLogfmtLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sim: sim, inv: inv, logs: logs, api: api}
	for range 2 {
		f.mustRefresh(t)
	}
	if got, want := len(inv.Domains()), len(sim.DomainIDs())-1; got != want {
		t.Fatalf("%d VMs in the inventory, want every one but the odd: %d", got, want)
	}
	if _, ok := domainOf(inv, odd); ok {
		t.Error("the odd VM is in the inventory")
	}
	if got := value(t, inv, "veil_up"); got != "1" {
		t.Errorf("veil_up = %s", got)
	}
	if got := testutil.ToFloat64(metricOf(t, api, "veil_objects_rejected_total", `collection="domains",reason="type"`)); got != 2 {
		t.Errorf("veil_objects_rejected_total = %v, want 2 (one per refresh)", got)
	}
	if n := strings.Count(logs.String(), "id="+odd+" field=memory_count"); n != 1 {
		t.Errorf("the odd VM said %d times, want once:\n%s", n, logs)
	}
}
