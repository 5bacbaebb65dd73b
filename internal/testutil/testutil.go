// Package testutil holds what the tests of several packages share: a deadline-bound wait for a
// condition, a log sink safe to read while written, and embedded NATS servers (one, or a
// three-node JetStream cluster on loopback) that can be stopped and started again.
//
// For tests only; imports nothing of this module.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// FreePort returns a loopback TCP port that was free a moment ago and that it has not returned
// before in this process: the kernel may hand a port just closed out again, and a cluster given
// the same port for two nodes never forms (seen on CI: two route ports alike).
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, ok := portsGiven[port]; !ok {
			portsGiven[port] = struct{}{}
			return port
		}
	}
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]struct{}{}
)

// NATS is a nats-server with JetStream on a temp dir: embedded (StartNATS), or a process of its
// own (a node of StartCluster). Stop and Start keep its port and store, so a test can take NATS
// away and bring it back.
type NATS struct {
	t    testing.TB
	opts server.Options
	mu   sync.Mutex
	srv  *server.Server
	node *node // a cluster node's process; nil when embedded
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

// Name is the server's name, as stream and cluster information give it.
func (n *NATS) Name() string { return n.opts.ServerName }

// Server is the running embedded server, nil while stopped and for a cluster node.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Start starts the server again (a no-op while it runs).
func (n *NATS) Start() {
	n.t.Helper()
	if err := n.start(); err != nil {
		n.t.Fatal(err)
	}
}

// start is Start without failing the test, for goroutines other than the test's.
func (n *NATS) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node != nil {
		return n.node.start()
	}
	if n.srv != nil {
		return nil
	}
	opts := n.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		return errors.New("nats-server did not start")
	}
	n.srv = srv
	return nil
}

// Stop shuts the server down (a no-op while stopped).
func (n *NATS) Stop() {
	n.mu.Lock()
	if n.node != nil {
		defer n.mu.Unlock()
		n.node.stop()
		return
	}
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
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

// WaitHTTP waits until a GET of u answers 200.
func WaitHTTP(tb testing.TB, u string, timeout time.Duration) {
	tb.Helper()
	EventuallyNil(tb, timeout, func() error {
		resp, err := http.Get(u)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}, "%s to answer 200", u)
}

// Do sends a request without a body to url and returns the status and the body.
func Do(t testing.TB, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// WaitReady waits until base/-/ready answers 200; logs is shown when it does not in 15 s.
func WaitReady(t testing.TB, base string, logs fmt.Stringer) {
	t.Helper()
	Eventually(t, 15*time.Second, func() bool { code, _ := Do(t, http.MethodGet, base+"/-/ready"); return code == 200 }, "ready; logs:\n%s", logs)
}
