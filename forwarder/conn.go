package forwarder

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"strconv"
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
)

// Conn is the NATS connection events are published on, with the embedded server when configured.
// NATS being unreachable is not an error of Connect: the client reconnects in the background and
// each forwarder sets up the stream (setUp) from its own loop, so the exporter serves everything
// else meanwhile.
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
	down      bool // a failure was logged and no connection came since
	shown     bool // a connection was logged
	setupMu   sync.Mutex
	// streamOK says the stream was created or checked since the connection last came up: a
	// reconnect may reach a server (a fresh one) that lacks it.
	streamOK atomic.Bool
	// atomic says the stream takes atomic batches (allow_atomic, nats-server 2.12+); expect that
	// the server enforces an expected last sequence over a subject filter (2.11+). Both are
	// learnt when the stream is set up.
	atomic, expect atomic.Bool
	featuresShown  bool // learnFeatures logged once; guarded by setupMu
	closeOne       sync.Once
	// replicas of the stream and the positions bucket when this connection creates them: the
	// replicas' ha.replicas, so that losing one NATS server of a cluster pauses nothing. 1 alone.
	replicas atomic.Int32
}

// ConnStatus is what the status page shows of the NATS connection; it never holds secrets.
// LastError stays after the connection came back: LastErrorAt tells when it happened.
type ConnStatus struct {
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
	c := &Conn{cfg: cfg, logger: logger, url: config.RedactURL(cfg.URL), files: fileDigests(cfg)}
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

// failed records a connection failure and logs the first of a run.
func (c *Conn) failed(err error, msg string) {
	if errors.Is(err, nats.ErrNoServers) {
		err = c.dialCause(err)
	}
	text := redactErr(err, c.cfg)
	c.mu.Lock()
	c.lastErr, c.lastErrAt = text, time.Now()
	first := !c.down
	c.down = true
	c.mu.Unlock()
	if first {
		level.Warn(c.logger).Log("msg", msg, "url", c.url, "err", text)
	}
}

// dialCause replaces the client's "no servers available" by why the first server could not be
// reached (refused, timed out, unknown host), which is what an operator needs; err when the
// server can be reached (then the failure is past the TCP connection).
func (c *Conn) dialCause(err error) error {
	addr := c.url
	if c.srv != nil {
		addr = c.srv.ClientURL()
	}
	first, _, _ := strings.Cut(addr, ",")
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

// connected logs the connection coming (once per run of failures, and at start).
func (c *Conn) connected() {
	c.streamOK.Store(false)
	c.mu.Lock()
	show := c.down || !c.shown
	c.down, c.shown = false, true
	c.mu.Unlock()
	if show {
		level.Info(c.logger).Log("msg", "NATS connected", "url", c.url)
	}
}

// setUp creates or checks the stream once per connection; until it succeeds, nothing is published.
// It is called from each forwarder's loop, which retries it with backoff.
func (c *Conn) setUp(ctx context.Context) error {
	if !c.Connected() {
		return c.notConnected()
	}
	if c.js == nil || c.streamOK.Load() {
		return nil
	}
	c.setupMu.Lock()
	defer c.setupMu.Unlock()
	if c.streamOK.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JetStream.PublishTimeout)
	defer cancel()
	sc, err := c.ensureStream(ctx)
	if err != nil {
		return fmt.Errorf("couldn't set up stream %s on NATS at %s: %w", c.cfg.JetStream.Stream, c.url, err)
	}
	c.learnFeatures(sc)
	c.streamOK.Store(true)
	return nil
}

// learnFeatures decides how publishes are guarded on this stream and server, and says once per
// change what is missing for the full guarantee.
func (c *Conn) learnFeatures(sc jetstream.StreamConfig) {
	v := c.nc.ConnectedServerVersion()
	expect := serverAtLeast(v, 2, 11)
	atomicOK := expect && sc.AllowAtomicPublish && serverAtLeast(v, 2, 12)
	wasExpect, wasAtomic := c.expect.Swap(expect), c.atomic.Swap(atomicOK)
	switch {
	case !expect && (wasExpect || !c.featuresShown):
		level.Warn(c.logger).Log("msg", "the NATS server is older than 2.11: publishes carry no expectation the stream enforces, and only the duplicate window guards against publishing twice; upgrade NATS",
			"server_version", v)
	case expect && !atomicOK && (wasAtomic || !c.featuresShown):
		level.Warn(c.logger).Log("msg", "the stream does not take atomic batches: events are published one at a time, each checked by the stream (slower); set allow_atomic on the stream (nats-server 2.12+)",
			"stream", sc.Name, "server_version", v)
	}
	c.featuresShown = true
}

// serverAtLeast compares a server version "2.12.1" with major.minor; unparsable is too old.
func serverAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func (c *Conn) atomicBatches() bool { return c.atomic.Load() }
func (c *Conn) expectations() bool  { return c.expect.Load() }

// noAtomic follows the stream refusing atomic batches (allow_atomic turned off): set up again,
// which also says so.
func (c *Conn) noAtomic() {
	c.atomic.Store(false)
	c.streamOK.Store(false)
}

// reconnects is how many times nc connected again; a change means a new connection to a server
// that may have lost what it acknowledged.
func reconnects(nc *nats.Conn) uint64 {
	if nc == nil {
		return 0
	}
	return nc.Stats().Reconnects
}

// errStreamConfig is a stream that NATS answered for but that does not fit the configuration.
var errStreamConfig = errors.New("stream does not fit the configuration")

// Verify sets up the stream now when NATS answers, and fails only when the stream contradicts
// the configuration (missing with create_stream false, subjects not covered): a reload or start
// refuses such a configuration. NATS unreachable, or any other failure, is left to the
// forwarders, which retry with backoff.
func (c *Conn) Verify(ctx context.Context) error {
	if err := c.setUp(ctx); errors.Is(err, errStreamConfig) {
		return err
	}
	return nil
}

// notConnected is the error of an operation that needs the connection while it is down.
func (c *Conn) notConnected() error {
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

// ensureStream creates the stream when it does not exist (create_stream) and otherwise only
// checks it: the stream is usually provisioned with its own limits (deploy/nats/stream.json:
// max_age, max_bytes, ...), which an update from here would reset to unlimited.
func (c *Conn) ensureStream(ctx context.Context) (jetstream.StreamConfig, error) {
	name := c.cfg.JetStream.Stream
	subject := c.cfg.SubjectPrefix + ".>"
	dw := c.cfg.JetStream.DuplicateWindow
	if dw <= 0 {
		dw = time.Hour
	}
	// One attempt: the forwarder's loop retries with backoff (the server may still be
	// recovering its store right after a restart, or be away).
	s, err := c.js.Stream(ctx, name)
	if err == nil {
		sc := s.CachedInfo().Config
		return sc, c.checkStream(sc, subject)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return jetstream.StreamConfig{}, err
	}
	if !c.cfg.JetStream.CreateStream {
		return jetstream.StreamConfig{}, fmt.Errorf("%w: stream %s does not exist and nats.jetstream.create_stream is false", errStreamConfig, name)
	}
	sc := jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Duplicates: dw, Storage: jetstream.FileStorage, Replicas: c.Replicas(),
		// Atomic batches carry the expectation that fences publishing (publish.go); a server
		// older than 2.12 refuses the field, so it is asked for only where it is known.
		AllowAtomicPublish: serverAtLeast(c.nc.ConnectedServerVersion(), 2, 12),
	}
	if _, err = c.js.CreateStream(ctx, sc); err != nil {
		// Already in use: another instance created it meanwhile; the retry checks it.
		return jetstream.StreamConfig{}, err
	}
	level.Info(c.logger).Log("msg", "created JetStream stream", "stream", name, "subjects", subject, "duplicate_window", dw, "replicas", c.Replicas(), "allow_atomic", sc.AllowAtomicPublish)
	return sc, nil
}

// checkStream verifies an existing stream without changing it: subjects not captured would lose
// every event. (A short duplicate window is no concern: each publish carries an expectation the
// stream enforces, publish.go.)
func (c *Conn) checkStream(sc jetstream.StreamConfig, subject string) error {
	if !covers(sc.Subjects, subject) {
		return fmt.Errorf("%w: stream %s does not capture subjects %q (its subjects: %q); add them to the stream or change nats.subject_prefix",
			errStreamConfig, sc.Name, subject, sc.Subjects)
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

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	c.lastErr, c.lastErrAt = redactErr(err, c.cfg), time.Now()
	c.mu.Unlock()
}

// Connected reports whether the connection is up right now.
func (c *Conn) Connected() bool { return c != nil && c.nc != nil && c.nc.IsConnected() }

// SetReplicas sets the replicas of the stream and the positions bucket this connection creates
// (an existing one is used as it is); call it before the forwarders run.
func (c *Conn) SetReplicas(n int) { c.replicas.Store(int32(max(n, 1))) }

// Replicas is what SetReplicas set, 1 by default.
func (c *Conn) Replicas() int { return max(int(c.replicas.Load()), 1) }

// JetStream is a JetStream context on the connection, for the replicas' lease bucket: the
// events' own when they use JetStream, else one made for the purpose.
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
func (c *Conn) Status() ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStatus{URL: c.url, Connected: c.Connected(), LastError: c.lastErr, LastErrorAt: c.lastErrAt, Embedded: c.srv != nil}
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
