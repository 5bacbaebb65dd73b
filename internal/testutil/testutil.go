// Package testutil holds what the tests of several packages share: a deadline-bound wait for a
// condition, a log sink safe to read while written, and embedded NATS servers (one, or a
// three-node JetStream cluster on loopback) that can be stopped and started again.
package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Eventually polls cond until it returns true and fails the test when timeout passes first.
// It is the one way tests wait for something that happens in another goroutine or process.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// EventuallyNil polls check until it returns nil and fails the test when timeout passes first,
// reporting the last error check returned (what was still wrong).
func EventuallyNil(t testing.TB, timeout time.Duration, check func() error, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, fmt.Sprintf(format, args...), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SyncBuffer is a log sink that tests read while loggers write.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// NATS is an embedded nats-server with JetStream on a temp dir; Stop and Start keep its port
// and store, so a test can take NATS away and bring it back.
type NATS struct {
	t    testing.TB
	opts server.Options
	mu   sync.Mutex
	srv  *server.Server
}

// StartNATS starts a single JetStream server on a free loopback port; the test's cleanup stops it.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, opts: server.Options{
		ServerName: "test-" + strconv.Itoa(FreePort(t)),
		Host:       "127.0.0.1", Port: FreePort(t),
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	}}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// URL is the client URL of the server (valid while it is stopped too).
func (n *NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.opts.Port) }

// Server is the running server, nil while stopped.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Start starts the server again (a no-op while it runs).
func (n *NATS) Start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return
	}
	opts := n.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		n.t.Fatal("nats-server did not start")
	}
	n.srv = srv
}

// Stop shuts the server down (a no-op while stopped).
func (n *NATS) Stop() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Cluster is three JetStream servers on loopback joined by routes.
type Cluster struct{ Nodes []*NATS }

// StartCluster starts a three-node JetStream cluster and waits until it has a meta leader.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	const size = 3
	clientPorts := make([]int, size)
	routePorts := make([]int, size)
	for i := range size {
		clientPorts[i], routePorts[i] = FreePort(t), FreePort(t)
	}
	c := &Cluster{}
	for i := range size {
		var routes []string
		for j := range size {
			if j != i {
				routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(routePorts[j]))
			}
		}
		opts := server.Options{
			ServerName: "n" + strconv.Itoa(i), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "veil-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  server.RoutesFromStr(joinComma(routes)),
		}
		c.Nodes = append(c.Nodes, &NATS{t: t, opts: opts})
	}
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Start() }()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Stop()
		}
	})
	// A meta leader alone is not enough: an R3 stream created before the leader has seen every
	// peer fails with "no suitable peers for placement".
	Eventually(t, 30*time.Second, func() bool {
		for _, n := range c.Nodes {
			s := n.Server()
			if s == nil || !s.JetStreamIsLeader() {
				continue
			}
			info, err := s.Jsz(&server.JSzOptions{})
			if err != nil || info.Meta == nil || len(info.Meta.Replicas) != len(c.Nodes)-1 {
				return false
			}
			for _, p := range info.Meta.Replicas {
				if !p.Current || p.Offline {
					return false
				}
			}
			return true
		}
		return false
	}, "a JetStream meta leader that sees every peer current")
	// Even then a slow machine may refuse the first R3 placement: prove it with a probe stream.
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	EventuallyNil(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "READY_PROBE", Subjects: []string{"ready.probe"}, Replicas: size})
		return err
	}, "an R3 probe stream to be placed")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "READY_PROBE"); err != nil {
		t.Fatal(err)
	}
	return c
}

// URLs is the comma-separated list of the cluster's client URLs.
func (c *Cluster) URLs() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL())
	}
	return joinComma(urls)
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, v := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v)
	}
	return b.String()
}
