// Package natsconn is the exporter's NATS connection: connecting and reconnecting forever with
// backoff, the embedded server when configured, the one-time logging of failures and recoveries,
// what the status page shows of it (never a secret) and the file digests that tell a reload to
// reconnect. It knows nothing of streams or leases: forwarder builds on it (learning from
// Generation that a reconnect happened) and ha is handed its JetStream. Imports config,
// internal/runstatus (how a run of failures is logged) and the NATS libraries, never forwarder,
// ha or collector.
package natsconn

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

// Conn is the NATS connection events are published on and leases kept, with the embedded server
// when configured. NATS being unreachable is not an error of Connect: the client reconnects in the
// background and each user sets up what it needs (a stream, a bucket) from its own loop, so the
// exporter serves everything else meanwhile.
type Conn struct {
	nc     *nats.Conn
	js     jetstream.JetStream // nil when JetStream is disabled
	srv    *server.Server      // embedded server, nil when not embedded
	cfg    config.NATS
	url    string // without credentials
	logger log.Logger
	// files holds the digest of each credential, key and CA file at connect, by path: a reload
	// reconnects when one was replaced, even with the same configuration text.
	files     map[string][sha256.Size]byte
	mu        sync.Mutex
	lastErr   string
	lastErrAt time.Time
	outage    runstatus.Outage // logs a run of connection failures and its end
	shown     bool             // a connection was logged
	closeOne  sync.Once
	// closing is set by Close; lost holds why the server closed the connection for good (a
	// protocol error the client does not reconnect from), lostCh is closed then.
	closing  atomic.Bool
	lost     atomic.Pointer[string]
	lostCh   chan struct{}
	lostOnce sync.Once
}

// Status is what the status page shows of the NATS connection; it never holds secrets.
// LastError stays after the connection came back: LastErrorAt tells when it happened.
type Status struct {
	URL         string
	Connected   bool
	LastError   string
	LastErrorAt time.Time
	Embedded    bool
}

// Connect starts the embedded server when configured and connects, reconnecting forever with
// backoff. It fails only for what a retry cannot mend (embedded server, unreadable key or
// certificate files); an unreachable server is logged once with its cause, and once more when
// the connection comes.
func Connect(cfg config.NATS, logger log.Logger) (*Conn, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	c := &Conn{cfg: cfg, logger: logger, url: config.RedactURL(cfg.URL), files: fileDigests(cfg), lostCh: make(chan struct{})}
	c.outage.Logger = logger
	connURL := cfg.URL
	if cfg.Embedded.Enabled {
		srv, err := startEmbedded(cfg.Embedded)
		if err != nil {
			return nil, err
		}
		c.srv = srv
		c.url, connURL = srv.ClientURL(), srv.ClientURL()
	}
	opts, err := c.options(cfg)
	if err != nil {
		c.shutdownServer()
		return nil, err
	}
	nc, err := nats.Connect(connURL, opts...)
	if err != nil {
		c.shutdownServer()
		return nil, fmt.Errorf("couldn't connect to NATS at %s: %w", c.url, errors.New(redactErr(err, cfg)))
	}
	c.mu.Lock()
	c.nc = nc
	c.mu.Unlock()
	if nc.IsConnected() {
		c.connected()
	}
	if cfg.JetStream.Enabled {
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(max(cfg.JetStream.MaxPending, 1)),
			jetstream.WithPublishAsyncTimeout(cfg.JetStream.PublishTimeout))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("couldn't start JetStream: %w", err)
		}
		c.js = js
	}
	return c, nil
}

// options are the client's options: reconnecting forever with backoff, the handlers that keep
// c's state, and the credentials and TLS files of cfg.
func (c *Conn) options(cfg config.NATS) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("veil-exporter"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.CustomReconnectDelay(reconnectDelay),
		// Publishing while disconnected must fail rather than queue: a buffered message flushed
		// after a retried earlier one would break the per-controller order.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.failed(err, "NATS disconnected; reconnecting with backoff")
			}
		}),
		// Called for the first attempt that fails at start as well as for every failed reconnect.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			c.failed(err, "NATS unreachable; events wait until it connects, retrying with backoff")
		}),
		nats.ConnectHandler(func(*nats.Conn) { c.connected() }),
		nats.ReconnectHandler(func(*nats.Conn) { c.connected() }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.setErr(err) }),
		// The client reconnects from everything but a server error it does not know (such as
		// "maximum control line exceeded"): then the connection is closed for good.
		nats.ClosedHandler(func(nc *nats.Conn) { c.closed(nc.LastError()) }),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't read nkey file: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, string(cfg.Password)))
	}
	if cfg.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLS.CAFile))
	}
	if cfg.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.TLS.CertFile, cfg.TLS.KeyFile))
	}
	return opts, nil
}

// failed records a connection failure and logs the first of a run.
func (c *Conn) failed(err error, msg string) {
	if errors.Is(err, nats.ErrNoServers) {
		err = c.dialCause(err)
	}
	text := redactErr(err, c.cfg)
	now := time.Now()
	c.mu.Lock()
	c.lastErr, c.lastErrAt = text, now
	c.mu.Unlock()
	c.outage.Fail(now, level.Warn, msg, errors.New(text), "url", c.url)
}

// dialCause replaces the client's "no servers available" by why the first server could not be
// reached (refused, timed out, unknown host), which is what an operator needs; err when the
// server can be reached (then the failure is past the TCP connection).
func (c *Conn) dialCause(err error) error {
	first, _, _ := strings.Cut(c.url, ",") // the embedded server's own URL when embedded
	u, perr := url.Parse(strings.TrimSpace(first))
	if perr != nil || u.Host == "" {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	conn, derr := net.DialTimeout("tcp", host, time.Second)
	if derr != nil {
		return derr
	}
	conn.Close()
	return err
}

// closed records a connection the server closed for good; the daemon then dials a new one
// (Lost). A Close of ours is not that.
func (c *Conn) closed(err error) {
	if c.closing.Load() {
		return
	}
	why := "closed by the client"
	if err != nil {
		why = redactErr(err, c.cfg)
	}
	c.lostOnce.Do(func() {
		c.lost.Store(&why)
		c.mu.Lock()
		c.lastErr, c.lastErrAt = "connection closed for good: "+why, time.Now()
		c.mu.Unlock()
		level.Error(c.logger).Log("msg", "the NATS connection was closed for good after a server error; dialling a new one", "err", why, "url", c.url)
		close(c.lostCh)
	})
}

// Lost is closed when the connection was closed for good by an error the client does not
// reconnect from; LostReason says which ("" while it was not).
func (c *Conn) Lost() <-chan struct{} { return c.lostCh }

// LostReason says why the connection was closed for good, "" while it was not.
func (c *Conn) LostReason() string {
	if p := c.lost.Load(); p != nil {
		return *p
	}
	return ""
}

// connected logs the connection coming (once per run of failures, and at start).
func (c *Conn) connected() {
	c.mu.Lock()
	first := !c.shown
	c.shown = true
	c.mu.Unlock()
	if !c.outage.Recover(time.Now(), "NATS connected", "url", c.url) && first {
		level.Info(c.logger).Log("msg", "NATS connected", "url", c.url)
	}
}

// Generation counts the reconnects (0 on the first connection): the client's own count, raised
// before anything flows on the new connection. What a user set up on the server (a stream
// checked, a position read) holds for the generation it was set up in: a reconnect may reach
// another server, or a fresh one, that lacks it.
func (c *Conn) Generation() uint64 {
	if c == nil || c.nc == nil {
		return 0
	}
	return c.nc.Stats().Reconnects
}

// NotConnected is the error of an operation that needs the connection while it is down: the URL
// and the last failure, without credentials.
func (c *Conn) NotConnected() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != "" {
		return fmt.Errorf("NATS at %s not connected: %s", c.url, c.lastErr)
	}
	return fmt.Errorf("NATS at %s not connected", c.url)
}

// reconnectDelay backs off from 250ms to 5s; nats.go adds the jitter.
func reconnectDelay(attempts int) time.Duration {
	d := 250 * time.Millisecond << min(attempts, 5)
	return min(d, 5*time.Second)
}

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	c.lastErr, c.lastErrAt = redactErr(err, c.cfg), time.Now()
	c.mu.Unlock()
}

// Connected reports whether the connection is up right now.
func (c *Conn) Connected() bool { return c != nil && c.nc != nil && c.nc.IsConnected() }

// NATS is the client connection itself, for requests the JetStream API has no call for (atomic
// batches, a message get from the stream leader) and core NATS publishing.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// URL is the server's URL without credentials (the embedded server's when embedded).
func (c *Conn) URL() string { return c.url }

// JetStream is a JetStream context on the connection: the events' own when nats.jetstream is
// enabled, else one made for the purpose (the replicas' lease bucket).
func (c *Conn) JetStream() (jetstream.JetStream, error) {
	if c.js != nil {
		return c.js, nil
	}
	return jetstream.New(c.nc)
}

// FilesChanged says whether a credential, key or CA file the connection was made with now holds
// other content (or cannot be read): a reload then reconnects, though the configuration text is
// the same.
func (c *Conn) FilesChanged() bool {
	return !maps.Equal(c.files, fileDigests(c.cfg))
}

// fileDigests reads the files of cfg that hold credentials, keys and CAs; an unreadable file gets
// the zero digest, which no content has.
func fileDigests(cfg config.NATS) map[string][sha256.Size]byte {
	d := map[string][sha256.Size]byte{}
	for _, f := range []string{cfg.CredsFile, cfg.NKeyFile, cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			d[f] = [sha256.Size]byte{}
			continue
		}
		d[f] = sha256.Sum256(b)
	}
	return d
}

// Status describes the connection without credentials.
func (c *Conn) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Status{URL: c.url, Connected: c.Connected(), LastError: c.lastErr, LastErrorAt: c.lastErrAt, Embedded: c.srv != nil}
}

// Close drains nothing: users advance what they keep (the forwarders' positions) only on
// acknowledgements, so closing loses nothing.
func (c *Conn) Close() {
	c.closeOne.Do(func() {
		c.closing.Store(true)
		if c.nc != nil {
			c.nc.Close()
		}
		c.shutdownServer()
	})
}

func (c *Conn) shutdownServer() {
	if c.srv != nil {
		c.srv.Shutdown()
		c.srv.WaitForShutdown()
	}
}

// redactErr keeps the password out of error texts.
func redactErr(err error, cfg config.NATS) string {
	s := err.Error()
	if p := string(cfg.Password); p != "" {
		s = strings.ReplaceAll(s, p, "<secret>")
	}
	return s
}
