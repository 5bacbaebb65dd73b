package forwarder

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
)

// BenchmarkPublishOptions measures the ways of publishing with an expectation the stream enforces
// against publishing with none (Nats-Msg-Id alone, as before), on an embedded server with file
// storage: events per second, reported as events/s. The forwarder uses
// atomic_batch; serial_expect is its fallback on a stream without allow_atomic.
func BenchmarkPublishOptions(b *testing.B) {
	const events = 20000
	msgsOf := benchMessages(b, events)
	run := func(b *testing.B, atomicStream bool, publish publishFunc) {
		benchPublish(b, msgsOf, atomicStream, publish)
	}
	chained := func(size int) publishFunc {
		return func(ctx context.Context, c *Stream, msgs []*nats.Msg) error {
			p := &jsPublisher{stream: c, filter: "veil.events.prod.>", timeout: 5 * time.Second}
			var seq uint64
			for len(msgs) > 0 {
				n := min(size, len(msgs))
				_, last, err := p.publish(ctx, msgs[:n], seq)
				if err != nil {
					return err
				}
				seq, msgs = last, msgs[n:]
			}
			return nil
		}
	}
	for _, size := range []int{100, 250, 1000} {
		b.Run("atomic_batch_"+strconv.Itoa(size), func(b *testing.B) { run(b, true, chained(size)) })
	}
	b.Run("serial_expect", func(b *testing.B) { run(b, false, chained(1000)) })
	// As before: asynchronous, pipelined, Nats-Msg-Id alone (no fence).
	b.Run("async_no_expectation", func(b *testing.B) {
		run(b, true, func(_ context.Context, c *Stream, msgs []*nats.Msg) error {
			return publishAsyncBatch(c.js, nil, "", msgs)
		})
	})
	// One stream per controller: every sequence is predictable, so each message can expect the
	// stream's last sequence and still be pipelined.
	b.Run("stream_per_controller_predicted", func(b *testing.B) {
		run(b, true, func(_ context.Context, c *Stream, msgs []*nats.Msg) error {
			for i, m := range msgs {
				m.Header.Set("Nats-Expected-Last-Sequence", strconv.Itoa(i))
			}
			return publishAsyncBatch(c.js, nil, "", msgs)
		})
	})
}

// publishFunc publishes msgs on c's stream.
type publishFunc func(ctx context.Context, c *Stream, msgs []*nats.Msg) error

// benchMessages makes n events and returns what turns them into messages, in order.
func benchMessages(b *testing.B, n int) func() []*nats.Msg {
	body := make(map[string]any)
	body["message"] = "Virtual machine vm-0001 started on node node-01 by admin; a sentence as long as the platform writes them"
	body["type"], body["user"] = "info", "admin"
	body["entities"] = []map[string]string{{"entity_uuid": "6f1c9c1e-1f39-4f05-9c1f-3b9a3c1d2e4f", "entity_class": "domain"}}
	mk := func(i int) veil.Event {
		body["id"] = fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		body["created"] = time.Unix(1700000000, int64(i)*1000).UTC().Format(time.RFC3339Nano)
		raw, _ := json.Marshal(body)
		var e veil.Event
		if err := decodeEvent(raw, &e); err != nil {
			b.Fatal(err)
		}
		return e
	}
	evs := make([]veil.Event, n)
	for i := range evs {
		evs[i] = mk(i)
	}
	return func() []*nats.Msg {
		var pos position
		msgs := make([]*nats.Msg, len(evs))
		for i := range evs {
			pos.advance(evs[i].Created.Time, evs[i].ID)
			msgs[i], _ = (&envelope{prefix: "veil.events", controller: "prod", source: "http://127.0.0.1", order: oldestFirst}).message(&evs[i], &pos)
		}
		return msgs
	}
}

// benchPublish times publish over a fresh server and stream (taking atomic batches or not) for
// each of b.N rounds, reported as events/s.
func benchPublish(b *testing.B, msgsOf func() []*nats.Msg, atomicStream bool, publish publishFunc) {
	for range b.N {
		b.StopTimer()
		ns := testutil.StartNATS(b)
		cfg := natsConfig(ns.URL())
		conn, err := natsconn.Connect(cfg, log.NewNopLogger())
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		stream := NewStream(conn, cfg, 1, nil)
		if _, err := stream.js.CreateStream(ctx, jetstream.StreamConfig{Name: "VEIL_EVENTS", Subjects: []string{"veil.events.>"},
			Storage: jetstream.FileStorage, Duplicates: time.Hour, AllowAtomicPublish: atomicStream}); err != nil {
			b.Fatal(err)
		}
		if err := stream.setUp(ctx); err != nil {
			b.Fatal(err)
		}
		msgs := msgsOf()
		b.StartTimer()
		start := time.Now()
		if err := publish(ctx, stream, msgs); err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(len(msgs))/el.Seconds(), "events/s")
		conn.Close()
		ns.Stop()
	}
}
