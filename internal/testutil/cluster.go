// This file holds StartCluster: three JetStream servers on loopback joined by routes, each a
// process of natsnode. In the test binary, under the race detector, nats-server v2.15.2 reports
// races in its own clustered code (jetstream_batching.go against applyStreamMsgOp) that made
// tests of ours fail for nothing of ours; out of process the server runs as in production and
// every line of our code stays instrumented.

package testutil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is three JetStream servers on loopback joined by routes.
type Cluster struct {
	Nodes []*NATS
	parts *partitions // with Partitionable
}

// node is a natsnode process (bin) that Stop and Start end and run again with the same
// arguments.
type node struct {
	bin  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs the node (a no-op while it runs) and returns once it accepts connections. It
// returns an error rather than failing the test: StartCluster starts the nodes in goroutines.
func (p *node) start() error {
	if p.cmd != nil {
		return nil
	}
	cmd := exec.Command(p.bin, p.args...)
	DieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		for sc.Scan() {
		}
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case ok := <-ready:
		if !ok {
			<-done
			return fmt.Errorf("natsnode %v did not start", p.args)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("natsnode %v not ready within 30 s", p.args)
	}
	p.cmd, p.done = cmd, done
	return nil
}

// stop ends the node as a shutdown does (a no-op while stopped).
func (p *node) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// StartCluster starts a three-node JetStream cluster and waits until it places an R3 stream.
func StartCluster(t testing.TB, options ...ClusterOption) *Cluster {
	t.Helper()
	var cfg clusterConfig
	for _, o := range options {
		o(&cfg)
	}
	// A port chosen free may be taken by another test before the node binds it: the node then
	// never gets ready. Start again on other ports, up to three times.
	bin := Build(t, "internal/testutil/natsnode")
	var c *Cluster
	for try := 1; ; try++ {
		var err error
		if c, err = startClusterOnce(t, cfg, bin); err == nil {
			break
		} else if try == 3 {
			t.Fatal(err)
		}
	}
	// The cluster is ready once it places an R3 stream: before its meta leader has seen every
	// peer, placement fails with "no suitable peers for placement".
	js := c.JetStream(t)
	EventuallyNil(t, 60*time.Second, func() error {
		// Short attempts: one sent before there is a meta leader is never answered.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "READY_PROBE", Subjects: []string{"ready.probe"}, Replicas: clusterSize})
		return err
	}, "an R3 probe stream to be placed")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "READY_PROBE"); err != nil {
		t.Fatal(err)
	}
	return c
}

// clusterSize is the number of nodes of a Cluster.
const clusterSize = 3

// startClusterOnce starts the nodes of a cluster on ports chosen free, stopped with the test;
// it fails when a node does not start.
func startClusterOnce(t testing.TB, cfg clusterConfig, bin string) (*Cluster, error) {
	clientPorts := make([]int, clusterSize)
	routePorts := make([]int, clusterSize)
	for i := range clusterSize {
		clientPorts[i], routePorts[i] = FreePort(t), FreePort(t)
	}
	c := &Cluster{}
	var extra []string // every node's arguments besides its own
	if cfg.partitionable {
		c.parts = newPartitions(t, clientPorts, routePorts)
		extra = []string{"-no-advertise", "-cluster-advertise", "127.0.0.1:" + strconv.Itoa(refusingPort(t))}
	}
	for i := range clusterSize {
		var routes []string
		for j := range clusterSize {
			switch {
			case j == i:
			case c.parts != nil:
				routes = append(routes, "nats-route://"+c.parts.routes[i][j].Addr())
			default:
				routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(routePorts[j]))
			}
		}
		name := "n" + strconv.Itoa(i)
		args := []string{"-name", name, "-port", strconv.Itoa(clientPorts[i]),
			"-cluster-port", strconv.Itoa(routePorts[i]), "-routes", joinComma(routes), "-store", t.TempDir()}
		if c.parts != nil {
			args = append(append(args, extra...), "-http", strconv.Itoa(c.parts.monitors[i]))
		}
		c.Nodes = append(c.Nodes, &NATS{t: t,
			opts: server.Options{ServerName: name, Port: clientPorts[i]},
			node: &node{bin: bin, args: args},
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, clusterSize)
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range c.Nodes {
			n.Stop()
		}
		return nil, err
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Stop()
		}
	})
	return c, nil
}

// newPartitions puts a link before every route between nodes and before every node's client
// port, and gives every node a monitoring port.
func newPartitions(t testing.TB, clientPorts, routePorts []int) *partitions {
	p := &partitions{routes: make([][]*Link, clusterSize)}
	for i := range clusterSize {
		p.routes[i] = make([]*Link, clusterSize)
		for j := range clusterSize {
			if j != i {
				p.routes[i][j] = newLink(t, "127.0.0.1:"+strconv.Itoa(routePorts[j]))
			}
		}
		p.clients = append(p.clients, newLink(t, "127.0.0.1:"+strconv.Itoa(clientPorts[i])))
		p.monitors = append(p.monitors, FreePort(t))
	}
	return p
}

// JetStream is a JetStream client of the cluster, its connection closed when the test ends.
func (c *Cluster) JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	return JetStream(tb, c.URLs())
}

// JetStream is a JetStream client of the server at url (or of any in a comma-separated list),
// its connection closed when the test ends.
func JetStream(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// URLs is the comma-separated list of the cluster's client URLs.
func (c *Cluster) URLs() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL())
	}
	return joinComma(urls)
}

// StreamLeader is the node leading stream, or nil while the cluster names none.
func (c *Cluster) StreamLeader(stream string) *NATS {
	nc, err := nats.Connect(c.URLs(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return nil
	}
	for _, n := range c.Nodes {
		if n.Name() == info.Cluster.Leader {
			return n
		}
	}
	return nil
}
