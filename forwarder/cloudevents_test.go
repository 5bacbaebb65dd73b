package forwarder

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	cejsm "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestSubscribersDecodeEveryMessageWithTheCloudEventsSDK reads back every message of a run as a
// subscriber does, with the CloudEvents SDK's NATS JetStream binding (binary mode), and checks
// that each is a valid event with the attributes the README promises: datacontenttype, time in
// UTC equal to the event's created, id, source, type, subject, and the body as data.
func TestSubscribersDecodeEveryMessageWithTheCloudEventsSDK(t *testing.T) {
	r := newRig(t, veiltest.Options{EventsOrder: "oldest_first", InitialTasks: -1}, "auto", "earliest")
	r.ev.PollInterval = 20 * time.Millisecond
	ids := r.sim.AddEvents(120, veiltest.EventSpec{})
	ids = append(ids, r.sim.AddEvents(30, veiltest.EventSpec{Type: "warning", EntityClass: "none"})...)
	ids = append(ids, r.sim.AddEvents(20, veiltest.EventSpec{Type: "error", EntityClass: "node", SameCreated: true})...)
	fw, stop := r.run()
	defer stop()
	testutil.Eventually(t, 20*time.Second, func() bool { return fw.Status().Published == uint64(len(ids)) }, "%d events published", len(ids))

	js := testutil.JetStream(t, r.nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, "VEIL_EVENTS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < len(ids) {
		batch, err := cons.Fetch(len(ids)-got, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			checkCloudEvent(t, ids[got], m)
			got++
			n++
		}
		if n == 0 {
			t.Fatalf("read %d of %d messages: %v", got, len(ids), batch.Error())
		}
	}
}

func checkCloudEvent(t *testing.T, id string, m jetstream.Msg) {
	t.Helper()
	msg := cejsm.NewMessage(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if msg.ReadEncoding() != binding.EncodingBinary {
		t.Fatalf("%s: read as %v, want binary mode", id, msg.ReadEncoding())
	}
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("%s: the SDK cannot decode it: %v", id, err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("%s: not a valid CloudEvent: %v", id, err)
	}
	var body struct {
		ID       string    `json:"id"`
		Type     string    `json:"type"`
		Created  veil.Time `json:"created"`
		Entities []struct {
			UUID string `json:"entity_uuid"`
		} `json:"entities"`
	}
	if err := json.Unmarshal(m.Data(), &body); err != nil {
		t.Fatal(err)
	}
	wantSubject := ""
	if len(body.Entities) > 0 {
		wantSubject = body.Entities[0].UUID
	}
	switch {
	case body.ID != id:
		t.Errorf("message for %s holds event %s", id, body.ID)
	case ev.DataContentType() != "application/json":
		t.Errorf("%s: datacontenttype %q", id, ev.DataContentType())
	case !ev.Time().Equal(body.Created.Time) || ev.Time().Location() != time.UTC:
		t.Errorf("%s: time %v, want the created instant %v in UTC", id, ev.Time(), body.Created.Time)
	case ev.ID() != "prod."+id || ev.Type() != "veil.events."+body.Type || ev.Subject() != wantSubject:
		t.Errorf("%s: id %q, type %q, subject %q", id, ev.ID(), ev.Type(), ev.Subject())
	case ev.Source() == "":
		t.Errorf("%s: no source", id)
	case !bytes.Equal(ev.Data(), m.Data()):
		t.Errorf("%s: data %s, want the body", id, ev.Data())
	}
}

// TestCloudEventsTimeAndEncoding: ce-time is the created instant in UTC whatever zone the journal
// wrote (none means UTC), and attribute values are percent-encoded where the binding asks.
func TestCloudEventsTimeAndEncoding(t *testing.T) {
	times := []struct{ created, want string }{
		{"2021-08-20T10:08:09.761081Z", "2021-08-20T10:08:09.761081Z"},
		{"2021-08-20T13:08:09.761081+03:00", "2021-08-20T10:08:09.761081Z"},
		{"2021-08-20T10:08:09.761081", "2021-08-20T10:08:09.761081Z"},
	}
	for _, tt := range times {
		var e veil.Event
		if err := decodeEvent([]byte(`{"id":"e1","type":"info","created":"`+tt.created+`"}`), &e); err != nil {
			t.Fatal(err)
		}
		pos := position{}
		pos.advance(e.Created.Time, e.ID)
		if got := msg((&envelope{prefix: "veil.events", controller: "prod", source: "https://veil", order: oldestFirst}).message(&e, &pos)).Header.Get("ce-time"); got != tt.want {
			t.Errorf("created %s: ce-time %q, want %q", tt.created, got, tt.want)
		}
	}
	values := []struct{ in, want string }{
		{"prod.6f1c9c1e-1f39-4f05-9c1f-3b9a3c1d2e4f", "prod.6f1c9c1e-1f39-4f05-9c1f-3b9a3c1d2e4f"},
		{"veil.events.custom type", "veil.events.custom%20type"},
		{"https://veil/a%20b", "https://veil/a%2520b"},
		{`say "hi"`, "say%20%22hi%22"},
		{"прод.e1", "%D0%BF%D1%80%D0%BE%D0%B4.e1"},
	}
	for _, tt := range values {
		if got := ceHeader(tt.in); got != tt.want {
			t.Errorf("ceHeader(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// msg is the message of message's two results.
func msg(m *nats.Msg, _ string) *nats.Msg { return m }
