package veil_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil/veilops"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestNumberAcceptsWhatThePlatformSends(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    veil.Number
		wantErr bool
	}{
		{`12.5`, 12.5, false},
		{`"2.492376"`, 2.492376, false},
		{`" 7 "`, 7, false},
		{`""`, 0, false},
		{`null`, 0, false},
		{`-3e2`, -300, false},
		{`{"value":1}`, 0, true},
		{`[1]`, 0, true},
		{`true`, 0, true},
		{`"abc"`, 0, true},
		{`"NaN"`, 0, true},
		{`"1e999"`, 0, true},
	} {
		var n veil.Number
		err := json.Unmarshal([]byte(tc.in), &n)
		if (err != nil) != tc.wantErr || (err == nil && n != tc.want) {
			t.Errorf("Number(%s) = %v, %v; want %v (error %v)", tc.in, n, err, tc.want, tc.wantErr)
		}
	}
}

func TestTimeAcceptsISOForms(t *testing.T) {
	want := time.Date(2021, 8, 20, 10, 8, 9, 761081000, time.UTC)
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{`"2021-08-20T10:08:09.761081Z"`, want, false},
		{`"2021-08-20T13:08:09.761081+03:00"`, want, false},
		{`"2021-08-20T10:08:09.761081"`, want, false},
		{`"2021-08-20 10:08:09.761081"`, want, false},
		{`"2021-08-20T10:08:09Z"`, want.Truncate(time.Second), false},
		{`null`, time.Time{}, false},
		{`""`, time.Time{}, false},
		{`"yesterday"`, time.Time{}, true},
		{`12345`, time.Time{}, true},
	} {
		var v veil.Time
		err := json.Unmarshal([]byte(tc.in), &v)
		if (err != nil) != tc.wantErr || (err == nil && !v.Equal(tc.want)) {
			t.Errorf("Time(%s) = %v, %v; want %v (error %v)", tc.in, v, err, tc.want, tc.wantErr)
		}
	}
}

func TestRefAcceptsObjectStringOrNull(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    veil.Ref
		wantErr bool
	}{
		{`{"id":"c1","verbose_name":"cluster one"}`, veil.Ref{ID: "c1", VerboseName: "cluster one"}, false},
		{`"c1"`, veil.Ref{ID: "c1"}, false},
		{`null`, veil.Ref{}, false},
		{`{"id":"c1","verbose_name":5}`, veil.Ref{ID: "c1"}, false},
		{`{"id":5}`, veil.Ref{}, true},
		{`42`, veil.Ref{}, true},
	} {
		var r veil.Ref
		err := json.Unmarshal([]byte(tc.in), &r)
		if (err != nil) != tc.wantErr || (err == nil && r != tc.want) {
			t.Errorf("Ref(%s) = %+v, %v; want %+v (error %v)", tc.in, r, err, tc.want, tc.wantErr)
		}
	}
}

func TestTaskExecutedNumberOrString(t *testing.T) {
	var running, done veil.Task
	if err := json.Unmarshal([]byte(`{"id":"a","status":"IN_PROGRESS","executed":0,"finished_time":null}`), &running); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"id":"b","status":"SUCCESS","executed":"2.492376","finished_time":"2021-08-20T10:08:09.761081Z"}`), &done); err != nil {
		t.Fatal(err)
	}
	if running.Final() || running.Executed != 0 || !running.FinishedTime.IsZero() {
		t.Errorf("running task %+v", running)
	}
	if !done.Final() || done.Executed != 2.492376 || done.FinishedTime.IsZero() {
		t.Errorf("done task %+v", done)
	}
}

func TestGuestUtilsEmptyOrOdd(t *testing.T) {
	for _, in := range []string{`{}`, `null`, `""`, `[]`, `false`} {
		var d veil.Domain
		if err := json.Unmarshal([]byte(`{"id":"d","guest_utils":`+in+`}`), &d); err != nil {
			t.Errorf("guest_utils %s: %v", in, err)
			continue
		}
		if d.GuestUtils.QemuState || d.GuestUtils.Hostname != "" {
			t.Errorf("guest_utils %s decoded as %+v", in, d.GuestUtils)
		}
	}
}

func TestEventToleratesOddFieldsAndKeepsRaw(t *testing.T) {
	in := `{"id":"e1","type":"info","message":{"en":"x"},"user":7,"created":"2021-08-20T10:08:09.761081Z","task":null,"entities":{"a":"b"},"extra":[1,2]}`
	var ev veil.Event
	if err := json.Unmarshal([]byte(in), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ID != "e1" || ev.Type != "info" || ev.Created.IsZero() || string(ev.Raw) != in {
		t.Fatalf("event %+v raw %s", ev, ev.Raw)
	}
	if err := json.Unmarshal([]byte(`{"id":5,"type":"info"}`), &ev); err == nil {
		t.Fatal("an event without a readable id was accepted")
	}
}

// TestLenientPageFromAPlatformQuirkServer serves what the simulator does not: a count as a
// string, a field of a wrong type that can be tolerated, and one that cannot (that object is
// skipped and told).
func TestLenientPageFromAPlatformQuirkServer(t *testing.T) {
	body := map[string]string{
		"/api/domains/": `{"count":"2","next":null,"previous":null,"results":[` +
			`{"id":"d1","verbose_name":"a","template":"yes","user_power_state":"3","node":"n1","guest_utils":{}},` +
			`{"id":"d2","verbose_name":"b","cpu_count":4,"parent":{"id":"t1","verbose_name":"tpl"}}]}`,
		"/api/nodes/": `{"count":1,"results":[{"id":"n1","cpu_count":{"value":4}}]}`,
		"/api/tasks/": `{"results":[]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body[r.URL.Path]))
	}))
	defer srv.Close()
	var told rejections
	c, err := veil.New(veil.Config{URL: srv.URL, Token: "t", Rejected: told.add})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ds, err := c.Domains(ctx, nil)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Domains = %+v, %v", ds, err)
	}
	if ds[0].Template || ds[0].UserPowerState != veil.PowerOn || ds[0].Node.ID != "n1" || ds[1].Parent == nil || ds[1].Parent.ID != "t1" {
		t.Errorf("domains decoded as %+v", ds)
	}
	// A node with an object for a number costs that node only: skipped, and told naming the field.
	ns, err := c.Nodes(ctx)
	if err != nil || len(ns) != 0 {
		t.Errorf("Nodes with an object for a number: %+v, %v; want none, no error", ns, err)
	}
	if rs := told.list(); len(rs) != 1 || rs[0].Collection != "nodes" || rs[0].ID != "n1" || rs[0].Field != "cpu_count" ||
		!strings.Contains(rs[0].Err.Error(), `"cpu_count"`) {
		t.Errorf("told %+v, want node n1 rejected for its cpu_count", rs)
	}
	_, err = c.Tasks(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "count") {
		t.Errorf("Tasks without count: %v", err)
	}
}

func TestSimulatorQuirksDecode(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 22, Nodes: 5, VMs: 40, StringPercentNodes: 0.5, TaskDuration: time.Hour})
	c := newClient(t, sim, nil)
	ctx := context.Background()
	// A running task next to finished ones: executed as a number and as a string.
	off := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return d.PowerState == veil.PowerOff && !d.Template })
	ops, err := veilops.New(sim.URL, sim.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.StartDomain(ctx, off.ID, false); err != nil {
		t.Fatal(err)
	}
	tasks, err := c.Tasks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var running, finished int
	for _, task := range tasks {
		if task.Final() {
			finished++
			if task.Executed <= 0 || task.FinishedTime.IsZero() {
				t.Errorf("finished task %+v", task)
			}
		} else {
			running++
		}
	}
	if running == 0 || finished == 0 {
		t.Errorf("%d running, %d finished tasks", running, finished)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.MemUsedPercentUser == nil || *n.MemUsedPercentUser <= 0 || n.Cluster.ID == "" {
			t.Errorf("node %+v", n)
		}
		detail, err := c.Node(ctx, n.ID) // cluster is a uuid string in the detail
		if err != nil || detail.Cluster.ID != n.Cluster.ID {
			t.Errorf("node detail cluster %+v, %v; want %s", detail.Cluster, err, n.Cluster.ID)
		}
	}
	domains, err := c.Domains(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var noAgent int
	for _, d := range domains {
		if d.GuestUtils.Version == "" {
			noAgent++ // guest_utils {}
		}
	}
	if noAgent == 0 {
		t.Errorf("no domain without an agent among %d", len(domains))
	}
}

func TestDomainTagsAsStringsOrObjects(t *testing.T) {
	var d veil.Domain
	if err := json.Unmarshal([]byte(`{"id":"a","tags":["prod",{"colour":"#ff0000","verbose_name":"db"}]}`), &d); err != nil {
		t.Fatal(err)
	}
	want := []veil.Tag{{Name: "prod"}, {Name: "db", Colour: "#ff0000"}}
	if len(d.Tags) != 2 || d.Tags[0] != want[0] || d.Tags[1] != want[1] {
		t.Fatalf("tags = %+v, want %+v", d.Tags, want)
	}
}
