// This file holds what the durability suite (e2e) needs to partition a cluster of StartCluster
// with the Partitionable option: every connection between the nodes, and every client
// connection made through ClientURLs, passes a Link of its own that the test can cut and heal.
//
// Only the links carry traffic: the nodes' routes point at the links of their ordered pair (one
// Link per dialling node and dialled node, so that cutting a pair leaves every other pair
// alone); clients are told no other node's URL (cluster no_advertise), so that a client given
// ClientURLs reconnects through a link, never to a node's own port; and every node gossips as
// its route address a port that refuses connections (cluster advertise), so that a node told by
// a third one about a peer it is cut from dials nowhere (an implicit route is tried once: see
// connectToRoute in nats-server's route.go). Routes tells, from each node's own monitoring, which
// peers a node holds routes to, and fails if a route it dialled bypasses its link.

package testutil

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ClusterOption changes what StartCluster starts.
type ClusterOption func(*clusterConfig)

type clusterConfig struct{ partitionable bool }

// Partitionable makes the cluster's routes, and its clients' connections through ClientURLs,
// pass links the test can cut (Link.Cut, Cluster.Cut, Cluster.Isolate) and heal.
func Partitionable() ClusterOption { return func(c *clusterConfig) { c.partitionable = true } }

// Link is a TCP forwarder on loopback that a test cuts and heals: a cut closes every connection
// through it and closes at once every connection made to it until Heal, as a partition both
// sides notice does. A silent partition, whose packets vanish, is Drop: the bytes of one
// direction (Forward: dialler to target; Back: the answers) or both (half-open: the connections
// stay up, nothing passes) are read and thrown away; Heal then closes the connections that lost
// bytes, as their TCP timeouts would have. Delay holds every chunk that long (a slow or lossy
// path: TCP turns lost packets into retransmission delays).
type Link struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	drop    [2]bool // by Direction
	delay   time.Duration
	conns   map[net.Conn]struct{}
	damaged map[net.Conn]struct{} // lost bytes to a Drop: closed at Heal
	turned  int                   // connections closed at once while cut
	wg      sync.WaitGroup
}

// Direction is one way through a Link.
type Direction int

// Directions through a Link.
const (
	Forward Direction = iota // from the connection's dialler to the link's target
	Back                     // from the target back to the dialler
)

// Drop throws away the bytes passing dir until Heal, without closing anything.
func (l *Link) Drop(dir Direction) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop[dir] = true
}

// Delay holds every chunk passing the link for d (0: none) until Heal.
func (l *Link) Delay(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = d
}

// newLink forwards a loopback port to target until the test ends.
func newLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]struct{}{}, damaged: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.serve()
	t.Cleanup(l.close)
	return l
}

// Addr is the link's host:port.
func (l *Link) Addr() string { return l.ln.Addr().String() }

func (l *Link) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// Cut closes every connection through the link and turns new ones away until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		c.Close()
	}
}

// Heal lets connections through again, ends Drop and Delay, and closes the connections that
// lost bytes to a Drop.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut, l.drop, l.delay = false, [2]bool{}, 0
	for c := range l.damaged {
		c.Close()
	}
	clear(l.damaged)
}

// Turned is how many connections the link closed at once because it was cut: a node or a
// client tried to pass it.
func (l *Link) Turned() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turned
}

// dialled is the local ports of the connections the link made to its target.
func (l *Link) dialled() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ports []int
	for c := range l.conns {
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.String() == l.target {
			ports = append(ports, c.LocalAddr().(*net.TCPAddr).Port)
		}
	}
	return ports
}

// Open is how many connections pass the link now.
func (l *Link) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns) / 2
}

func (l *Link) serve() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		cut := l.cut
		if cut {
			l.turned++
		}
		l.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", l.target, 2*time.Second)
		if err != nil { // the target is down: as it would be without the link
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.cut { // cut while dialling
			l.turned++
			l.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		l.conns[in], l.conns[out] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.wg.Add(2)
		pipe := func(dst, src net.Conn, dir Direction) {
			defer l.wg.Done()
			l.copy(dst, src, dir)
			dst.Close()
			src.Close()
			l.mu.Lock()
			delete(l.conns, dst)
			delete(l.conns, src)
			delete(l.damaged, dst)
			delete(l.damaged, src)
			l.mu.Unlock()
		}
		go pipe(out, in, Forward)
		go pipe(in, out, Back)
	}
}

// copy forwards src to dst, dropping or delaying as the link says at each chunk.
func (l *Link) copy(dst, src net.Conn, dir Direction) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.mu.Lock()
			drop, delay := l.drop[dir], l.delay
			if drop {
				l.damaged[src], l.damaged[dst] = struct{}{}, struct{}{}
			}
			l.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *Link) close() {
	l.ln.Close()
	l.Cut()
	l.wg.Wait()
}

// partitions is the links of a Partitionable cluster.
type partitions struct {
	routes   [][]*Link // routes[i][j]: node i dialling node j
	clients  []*Link   // clients[i]: to node i's client port
	monitors []int     // monitoring ports
}

// refusingPort reserves, until the test ends, a loopback port that refuses connections: a
// socket bound to it that never listens.
func refusingPort(t testing.TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	return sa.(*syscall.SockaddrInet4).Port
}

func (c *Cluster) index(n *NATS) int {
	i := slices.Index(c.Nodes, n)
	if i < 0 {
		c.Nodes[0].t.Fatalf("%s is not a node of the cluster", n.Name())
	}
	return i
}

func (c *Cluster) links() *partitions {
	if c.parts == nil {
		c.Nodes[0].t.Fatal("the cluster was not started Partitionable")
	}
	return c.parts
}

// ClientURLs is the comma-separated list of the links to the nodes' client ports.
func (c *Cluster) ClientURLs() string {
	var urls []string
	for _, l := range c.links().clients {
		urls = append(urls, "nats://"+l.Addr())
	}
	return joinComma(urls)
}

// ClientLink is the link to n's client port.
func (c *Cluster) ClientLink(n *NATS) *Link { return c.links().clients[c.index(n)] }

// Cut cuts the routes between a and b, both ways.
func (c *Cluster) Cut(a, b *NATS) {
	i, j := c.index(a), c.index(b)
	c.links().routes[i][j].Cut()
	c.links().routes[j][i].Cut()
}

// Isolate cuts n's routes to every other node.
func (c *Cluster) Isolate(n *NATS) {
	for _, o := range c.Nodes {
		if o != n {
			c.Cut(n, o)
		}
	}
}

// RouteLink is the link node a dials node b through.
func (c *Cluster) RouteLink(a, b *NATS) *Link { return c.links().routes[c.index(a)][c.index(b)] }

// HealAll heals every link of the cluster, routes and clients'.
func (c *Cluster) HealAll() {
	p := c.links()
	for i := range p.routes {
		for _, l := range p.routes[i] {
			if l != nil {
				l.Heal()
			}
		}
		p.clients[i].Heal()
	}
}

// Routes is the names of the nodes n holds a route to now, read from n's monitoring (/routez).
// It fails when a route of n passes no link (its remote end is neither a link n dialled nor a
// link's connection to n): the partition would leak.
func (c *Cluster) Routes(n *NATS) ([]string, error) {
	i := c.index(n)
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://127.0.0.1:" + strconv.Itoa(c.links().monitors[i]) + "/routez")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
			DidSolicit bool   `json:"did_solicit"`
			Port       int    `json:"port"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rz); err != nil {
		return nil, err
	}
	var through []int // the remote ports of routes that pass a link
	for j := range c.Nodes {
		if l := c.links().routes[i][j]; l != nil {
			through = append(through, l.port())
		}
		if l := c.links().routes[j][i]; l != nil {
			through = append(through, l.dialled()...)
		}
	}
	var names []string
	for _, r := range rz.Routes {
		if !slices.Contains(through, r.Port) {
			return nil, fmt.Errorf("%s holds a route to %s (solicited %v) from port %d, through no link", n.Name(), r.RemoteName, r.DidSolicit, r.Port)
		}
		if !slices.Contains(names, r.RemoteName) {
			names = append(names, r.RemoteName)
		}
	}
	slices.Sort(names)
	return names, nil
}
