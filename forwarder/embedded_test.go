package forwarder

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// embeddedServer starts the embedded server of sync on a free port and a temp dir, as
// nats.embedded does, and returns its client URL; the benchmark's cleanup stops it.
func embeddedServer(tb testing.TB, sync config.DiskSync) string {
	tb.Helper()
	cfg := config.Default().NATS
	cfg.Embedded = config.Embedded{
		Enabled: true, Listen: "127.0.0.1:" + strconv.Itoa(testutil.FreePort(tb)), StoreDir: tb.TempDir(), Sync: sync,
	}
	conn, err := natsconn.Connect(cfg, log.NewNopLogger())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Close)
	return conn.Status().URL
}

// BenchmarkEmbeddedSync measures what nats.embedded.sync costs: events of about 600 bytes
// published to the embedded server in batches of 250, asynchronously (each acknowledged), as one
// atomic batch (the commit acknowledged) or one by one (each once the one before was
// acknowledged, the forwarder's way on a stream without allow_atomic), under each setting. b.N is
// the number of events. The store is a temp dir, which must be on a real disk: on tmpfs a sync
// costs nothing. Figures are in README.md (NATS durability).
//
//	go test -run '^$' -bench EmbeddedSync -benchtime 100000x ./forwarder
func BenchmarkEmbeddedSync(b *testing.B) {
	const batch = 250
	body := []byte(`{"id":"00000000-0000-0000-0000-000000000000","created":"2025-01-01T00:00:00.000000Z",` +
		`"message":"` + strings.Repeat("x", 380) + `","type":"info","user":"admin",` +
		`"entities":[{"entity_uuid":"11111111-1111-1111-1111-111111111111","entity_class":"domain"}]}`)
	for _, s := range []struct {
		name string
		sync config.DiskSync
	}{
		{"always", config.DiskSync{Always: true}},
		{"100ms", config.DiskSync{Interval: 100 * time.Millisecond}},
		{"1s", config.DiskSync{Interval: time.Second}},
		{"10s", config.DiskSync{Interval: 10 * time.Second}},
		{"2m", config.DiskSync{Interval: 2 * time.Minute}},
	} {
		for _, mode := range []string{"async", "atomic", "one-by-one"} {
			b.Run("sync="+s.name+"/"+mode, func(b *testing.B) {
				nc, err := nats.Connect(embeddedServer(b, s.sync))
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
					Name: "VEIL_EVENTS", Subjects: []string{"veil.events.>"}, Storage: jetstream.FileStorage,
					Duplicates: time.Hour, AllowAtomicPublish: true,
				}); err != nil {
					b.Fatal(err)
				}
				publish := map[string]func(jetstream.JetStream, *nats.Conn, string, []*nats.Msg) error{
					"async": publishAsyncBatch, "atomic": publishAtomicBatch, "one-by-one": publishOneByOne,
				}[mode]
				var lat []time.Duration
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				for first := 0; first < b.N; first += batch {
					msgs := make([]*nats.Msg, 0, batch)
					for i := first; i < min(first+batch, b.N); i++ {
						m := nats.NewMsg("veil.events.bench.info.domain")
						m.Header.Set(jetstream.MsgIDHeader, "bench."+strconv.Itoa(i))
						m.Data = body
						msgs = append(msgs, m)
					}
					start := time.Now()
					if err := publish(js, nc, strconv.Itoa(first), msgs); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms/batch-p50")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms/batch-p99")
				b.ReportMetric(0, "ns/op") // per event it says nothing events/s does not
			})
		}
	}
}

// publishAsyncBatch publishes msgs without waiting, then waits for every acknowledgement.
func publishAsyncBatch(js jetstream.JetStream, _ *nats.Conn, _ string, msgs []*nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-time.After(10 * time.Second):
			return fmt.Errorf("no acknowledgement in 10s")
		}
	}
	return nil
}

// publishOneByOne publishes each message once the one before was acknowledged.
func publishOneByOne(js jetstream.JetStream, _ *nats.Conn, _ string, msgs []*nats.Msg) error {
	for _, m := range msgs {
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			return err
		}
	}
	return nil
}

// publishAtomicBatch publishes msgs as one atomic batch (ADR-50): every message but the last
// without waiting, the last with the commit header as a request, whose answer acknowledges all.
func publishAtomicBatch(_ jetstream.JetStream, nc *nats.Conn, id string, msgs []*nats.Msg) error {
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", "bench-"+id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			return fmt.Errorf("commit not acknowledged: %w", err)
		}
		var ack struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
			Count int `json:"count"`
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return err
		}
		if ack.Error != nil || ack.Count != len(msgs) {
			return fmt.Errorf("commit answered %s", resp.Data)
		}
	}
	return nil
}
