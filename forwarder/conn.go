package forwarder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
)

// Conn is the NATS connection events are published on, with the embedded server when configured.
type Conn struct {
	nc       *nats.Conn
	js       jetstream.JetStream // nil when JetStream is disabled
	srv      *server.Server      // embedded server, nil when not embedded
	cfg      config.NATS
	url      string // without credentials
	logger   log.Logger
	mu       sync.Mutex
	lastErr  string
	closeOne sync.Once
}

// ConnStatus is what the status page shows of the NATS connection; it never holds secrets.
type ConnStatus struct {
	URL       string
	Connected bool
	LastError string
	Embedded  bool
}

// Connect starts the embedded server when configured, connects (reconnecting forever with
// backoff) and creates or checks the stream when JetStream is enabled.
func Connect(ctx context.Context, cfg config.NATS, logger log.Logger) (*Conn, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	c := &Conn{cfg: cfg, logger: logger, url: config.RedactURL(cfg.URL)}
	if cfg.Embedded.Enabled {
		srv, err := startEmbedded(cfg.Embedded)
		if err != nil {
			return nil, err
		}
		c.srv = srv
		c.url = srv.ClientURL()
	}
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
				c.setErr(err)
				level.Warn(logger).Log("msg", "NATS disconnected", "url", c.url, "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			level.Info(logger).Log("msg", "NATS reconnected", "url", c.url)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.setErr(err) }),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			c.shutdownServer()
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
	connURL := cfg.URL
	if c.srv != nil {
		connURL = c.srv.ClientURL()
	}
	nc, err := nats.Connect(connURL, opts...)
	if err != nil {
		c.shutdownServer()
		return nil, fmt.Errorf("couldn't connect to NATS at %s: %w", c.url, errors.New(redactErr(err, cfg)))
	}
	c.nc = nc
	if cfg.JetStream.Enabled {
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(max(cfg.JetStream.MaxPending, 1)),
			jetstream.WithPublishAsyncTimeout(publishTimeout(cfg)))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("couldn't start JetStream: %w", err)
		}
		c.js = js
		if err := c.ensureStream(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func publishTimeout(cfg config.NATS) time.Duration {
	if cfg.JetStream.PublishTimeout > 0 {
		return cfg.JetStream.PublishTimeout
	}
	return 5 * time.Second
}

// reconnectDelay backs off from 250ms to 5s; nats.go adds the jitter.
func reconnectDelay(attempts int) time.Duration {
	d := 250 * time.Millisecond << min(attempts, 5)
	return min(d, 5*time.Second)
}

// ensureStream creates the stream when it does not exist (create_stream) and otherwise only
// checks it: the stream is usually provisioned with its own limits (deploy/nats/stream.json:
// max_age, max_bytes, ...), which an update from here would reset to unlimited.
func (c *Conn) ensureStream(ctx context.Context) error {
	name := c.cfg.JetStream.Stream
	subject := c.cfg.SubjectPrefix + ".>"
	dw := c.cfg.JetStream.DuplicateWindow
	if dw <= 0 {
		dw = time.Hour
	}
	// The server may still be recovering its store right after a restart: retry briefly.
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ {
		s, err := c.js.Stream(ctx, name)
		if err == nil {
			return c.checkStream(s.CachedInfo().Config, subject, dw)
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if !c.cfg.JetStream.CreateStream {
				return fmt.Errorf("stream %s does not exist and nats.jetstream.create_stream is false", name)
			}
			_, err = c.js.CreateStream(ctx, jetstream.StreamConfig{
				Name: name, Subjects: []string{subject}, Duplicates: dw, Storage: jetstream.FileStorage,
			})
			if err == nil {
				level.Info(c.logger).Log("msg", "created JetStream stream", "stream", name, "subjects", subject, "duplicate_window", dw)
				return nil
			}
			// Already in use: another instance created it meanwhile; check it on the next round.
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("couldn't set up stream %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("couldn't set up stream %s: %w", name, lastErr)
}

// checkStream verifies an existing stream without changing it. Subjects not captured would lose
// every event: an error. A duplicate window shorter than configured narrows what a restart can
// resend without duplicates, but still works: a warning.
func (c *Conn) checkStream(sc jetstream.StreamConfig, subject string, dw time.Duration) error {
	if !covers(sc.Subjects, subject) {
		return fmt.Errorf("stream %s does not capture subjects %q (its subjects: %q); add them to the stream or change nats.subject_prefix",
			sc.Name, subject, sc.Subjects)
	}
	if sc.Duplicates < dw {
		level.Warn(c.logger).Log("msg", "stream's duplicate window is shorter than nats.jetstream.duplicate_window: events resent after a longer outage or restart may be delivered twice; the stream is left unchanged",
			"stream", sc.Name, "stream_duplicate_window", sc.Duplicates, "duplicate_window", dw)
	}
	return nil
}

// covers reports whether one of the stream's subjects captures every subject want matches.
func covers(subjects []string, want string) bool {
	for _, s := range subjects {
		if subsetOf(want, s) {
			return true
		}
	}
	return false
}

// subsetOf reports whether every subject matched by the filter sub is matched by the filter of.
func subsetOf(sub, of string) bool {
	a, b := strings.Split(sub, "."), strings.Split(of, ".")
	for i, t := range b {
		if t == ">" {
			return i < len(a) // ">" needs at least one token
		}
		if i >= len(a) {
			return false
		}
		switch {
		case t == "*":
			if a[i] == ">" {
				return false
			}
		case t != a[i]:
			return false
		}
	}
	return len(a) == len(b)
}

func startEmbedded(cfg config.Embedded) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("bad nats.embedded.listen %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("bad nats.embedded.listen port %q: %w", portStr, err)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "veil-exporter", Host: host, Port: port,
		JetStream: true, StoreDir: cfg.StoreDir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		return nil, fmt.Errorf("couldn't create embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server did not start on %s", cfg.Listen)
	}
	return srv, nil
}

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	c.lastErr = redactErr(err, c.cfg)
	c.mu.Unlock()
}

// Connected reports whether the connection is up right now.
func (c *Conn) Connected() bool { return c != nil && c.nc != nil && c.nc.IsConnected() }

// Status describes the connection without credentials.
func (c *Conn) Status() ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStatus{URL: c.url, Connected: c.Connected(), LastError: c.lastErr, Embedded: c.srv != nil}
}

// Close drains nothing: positions are only advanced on acknowledgements, so closing loses nothing.
func (c *Conn) Close() {
	c.closeOne.Do(func() {
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
