package e2e

// This file holds what the fault table watches and slows things with: requests with the scrape
// timeout, a metric's value in an exposition, the scrape and health watcher, and the proxy
// that makes NATS slow.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// httpGet is one request with the scrape timeout; it never fails the test.
func httpGet(u string) (int, []byte, error) {
	c := http.Client{Timeout: scrapeTimeout}
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metricValue is the value of the first sample of the family name in an exposition.
func metricValue(exposition []byte, name string) (float64, bool) {
	for _, l := range bytes.Split(exposition, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte(name)) {
			continue
		}
		rest := l[len(name):]
		if len(rest) == 0 || rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		f := bytes.Fields(rest[bytes.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(f[0]), 64)
		return v, err == nil
	}
	return 0, false
}

// scrapeWatch scrapes /metrics and checks /-/healthy, as Prometheus and a liveness probe do,
// from the exporter's start to the row's end.
type scrapeWatch struct {
	mu       sync.Mutex
	n        int
	longest  time.Duration
	problems []string
	once     sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func watchScrapes(base string) *scrapeWatch {
	w := &scrapeWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			began := time.Now()
			code, _, err := httpGet(base + "/metrics")
			took := time.Since(began)
			hcode, hbody, herr := httpGet(base + "/-/healthy")
			w.mu.Lock()
			w.n++
			w.longest = max(w.longest, took)
			if err != nil || code != 200 || took > scrapeTimeout {
				w.problems = append(w.problems, fmt.Sprintf("scrape at %s: %d %v after %v", began.Format("15:04:05.000"), code, err, took))
			}
			if herr != nil || hcode != 200 {
				w.problems = append(w.problems, fmt.Sprintf("/-/healthy at %s: %d %v %s", began.Format("15:04:05.000"), hcode, herr, hbody))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *scrapeWatch) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}

func (w *scrapeWatch) finish() (n int, longest time.Duration, problems []string) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.longest, w.problems
}

// slowProxy forwards TCP connections to a NATS server and holds every answer (bytes from the
// server to the client) for a settable delay: a NATS server that is reachable but slow.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	quit   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startSlowProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target, quit: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) addr() string             { return p.ln.Addr().String() }
func (p *slowProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *slowProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // client → server, as it comes
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
			client.Close()
		}()
		go func() { // server → client, each chunk held until its time
			defer p.wg.Done()
			p.hold(server, client)
			server.Close()
			client.Close()
		}()
	}
}

type heldChunk struct {
	due  time.Time
	data []byte
}

func (p *slowProxy) hold(from, to net.Conn) {
	chunks := make(chan heldChunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				select {
				case chunks <- heldChunk{due: time.Now().Add(time.Duration(p.delay.Load())), data: buf[:n]}:
				case <-p.quit:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-p.quit:
				timer.Stop()
				return
			}
		}
		if _, err := to.Write(c.data); err != nil {
			return
		}
	}
}

func (p *slowProxy) close() {
	close(p.quit)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
