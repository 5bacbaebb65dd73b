package forwarder

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// natsServer is an embedded nats-server with JetStream that can be stopped and started again on
// the same port and store.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	srv  *server.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &natsServer{t: t, dir: t.TempDir(), port: port}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *natsServer) start() {
	n.t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir, NoSigs: true, NoLog: true})
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats-server did not start")
	}
	n.srv = srv
}

func (n *natsServer) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

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
}

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
	for {
		cons, err = js.OrderedConsumer(ctx, "VEIL_EVENTS", jetstream.OrderedConsumerConfig{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no stream to subscribe to: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := &receiver{nc: nc}
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

// waitFor waits until n messages arrived (or the deadline), then a little longer to catch extras.
func (r *receiver) waitFor(t testing.TB, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && len(r.received()) < n {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	return r.received()
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
	t    testing.TB
	sim  *veiltest.Server
	nats *natsServer
	conn *Conn
	cli  *veil.Client
	ev   config.Events
	nc   config.NATS
}

func newRig(t testing.TB, simOpts veiltest.Options, order, start string) *rig {
	t.Helper()
	sim := veiltest.New(simOpts)
	t.Cleanup(sim.Close)
	ns := startNATS(t)
	nc := natsConfig(ns.url())
	conn, err := Connect(context.Background(), nc, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	cli, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token, MaxConcurrency: 8, MaxRetries: 5, RetryBaseDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ev := config.Default().Events
	ev.PollInterval = 100 * time.Millisecond
	ev.Order, ev.Start = order, start
	ev.Checkpoint.Dir = t.TempDir()
	return &rig{t: t, sim: sim, nats: ns, conn: conn, cli: cli, ev: ev, nc: nc}
}

func (r *rig) forwarder() *Forwarder {
	r.t.Helper()
	logger := log.NewNopLogger()
	if os.Getenv("FORWARDER_TEST_LOG") != "" {
		logger = log.NewLogfmtLogger(os.Stderr)
	}
	fw, err := New(Options{Controller: "prod", ControllerURL: r.sim.URL, Client: r.cli, Events: r.ev, NATS: r.nc, Conn: r.conn, Logger: logger})
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

var _ = fmt.Sprint
