package forwarder

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func natsConfig(url string) config.NATS {
	c := config.Default().NATS
	c.URL = url
	c.JetStream.PublishTimeout = 2 * time.Second
	return c
}

// receiver counts what a JetStream subscriber (ordered consumer over the stream) receives.
type receiver struct {
	mu   sync.Mutex
	ids  []string
	msgs []jetstream.Msg
	cc   jetstream.ConsumeContext
	nc   *nats.Conn
	js   jetstream.JetStream
}

// subscribe consumes the stream from its start; it creates the stream as the forwarder would,
// so that a subscriber can start before the forwarder's first cycle.
func subscribe(t testing.TB, url string) *receiver {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cons jetstream.Consumer
	testutil.Eventually(t, 10*time.Second, func() bool {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "VEIL_EVENTS", Subjects: []string{"veil.events.>"},
			Duplicates: time.Hour, Storage: jetstream.FileStorage, AllowAtomicPublish: true}); err != nil {
			return false
		}
		cons, err = js.OrderedConsumer(ctx, "VEIL_EVENTS", jetstream.OrderedConsumerConfig{})
		return err == nil
	}, "a stream to subscribe to")
	r := &receiver{nc: nc, js: js}
	r.cc, err = cons.Consume(func(m jetstream.Msg) {
		r.mu.Lock()
		r.ids = append(r.ids, m.Headers().Get(nats.MsgIdHdr))
		if len(r.msgs) < 5 {
			r.msgs = append(r.msgs, m)
		}
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cc.Stop(); nc.Close() })
	return r
}

func (r *receiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// waitFor waits until at least n messages arrived and the subscriber has everything the stream
// holds (so that a duplicate stored is received too), or d passes; it returns what arrived.
func (r *receiver) waitFor(t testing.TB, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	// Past the deadline the wait ends without failing: exactlyOnceInOrder then says what is
	// missing or extra.
	testutil.Eventually(t, d+10*time.Second, func() bool {
		got := len(r.received())
		return got >= n && uint64(got) == r.stored() || time.Now().After(deadline)
	}, "%d messages", n)
	return r.received()
}

// stored is how many messages the stream holds (0 when it cannot be read).
func (r *receiver) stored() uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, "VEIL_EVENTS")
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// exactlyOnceInOrder fails unless got is want (prefixed by the controller), in order, once each.
func exactlyOnceInOrder(t testing.TB, controller string, want, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	dup, lost := 0, 0
	for id, n := range seen {
		if n > 1 {
			dup += n - 1
			if dup < 5 {
				t.Errorf("delivered %d times: %s", n, id)
			}
		}
	}
	for _, id := range want {
		if seen[controller+"."+id] == 0 {
			lost++
			if lost < 5 {
				t.Errorf("lost: %s", id)
			}
		}
	}
	if dup > 0 || lost > 0 || len(got) != len(want) {
		t.Fatalf("want %d events exactly once, got %d deliveries: %d lost, %d duplicated", len(want), len(got), lost, dup)
	}
	for i := range want {
		if got[i] != controller+"."+want[i] {
			t.Fatalf("out of order at %d: got %s, want %s", i, got[i], want[i])
		}
	}
}

type rig struct {
	t      testing.TB
	sim    *veiltest.Server
	nats   *testutil.NATS
	conn   *natsconn.Conn
	stream *Stream // on conn
	cli    *veil.Client
	ev     config.Events
	nc     config.NATS
}

func newRig(t testing.TB, simOpts veiltest.Options, order, start string) *rig {
	t.Helper()
	sim := veiltest.New(simOpts)
	t.Cleanup(sim.Close)
	ns := testutil.StartNATS(t)
	nc := natsConfig(ns.URL())
	conn, err := natsconn.Connect(nc, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	stream := NewStream(conn, nc, 1, nil)
	// Tests that publish without a forwarder's cycle need the stream set up as a cycle would.
	if err := stream.setUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	cli, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token, MaxConcurrency: 8, MaxRetries: 5, RetryBaseDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ev := config.Default().Events
	ev.PollInterval = 100 * time.Millisecond
	ev.Order, ev.Start = order, start
	ev.Checkpoint.Dir = t.TempDir()
	return &rig{t: t, sim: sim, nats: ns, conn: conn, stream: stream, cli: cli, ev: ev, nc: nc}
}

func (r *rig) forwarder() *Forwarder {
	r.t.Helper()
	logger := log.NewNopLogger()
	if os.Getenv("FORWARDER_TEST_LOG") != "" {
		logger = log.NewLogfmtLogger(os.Stderr)
	}
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, Stream: r.stream, Logger: logger})
	if err != nil {
		r.t.Fatal(err)
	}
	return fw
}

// run starts a forwarder and returns a function that stops it and waits.
func (r *rig) run() (*Forwarder, func()) {
	fw := r.forwarder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	return fw, func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("Run: %v", err)
		}
	}
}

// feed adds perTick events every tick for d, returning the ids oldest first.
func feed(sim *veiltest.Server, perTick int, tick, d time.Duration, spec veiltest.EventSpec) func() []string {
	var ids []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			ids = append(ids, sim.AddEvents(perTick, spec)...)
			time.Sleep(tick)
		}
	}()
	return func() []string { <-done; return ids }
}

func scale(short, long int) int {
	if os.Getenv("FORWARDER_LONG") != "" {
		return long
	}
	return short
}
