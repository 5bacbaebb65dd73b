package forwarder

// Stream: the events stream on one NATS connection, which every forwarder on that connection
// shares: it is created or checked once per generation of the connection (a reconnect may reach
// a fresh server that lacks it), and what its server and settings allow (atomic batches,
// expectations over a subject filter) is learnt then and said once.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// Stream is the stream events are published to, as seen from one connection. Make one per
// connection (NewStream) and give it to every forwarder on it.
type Stream struct {
	conn     *natsconn.Conn
	cfg      config.NATS
	replicas int // of the stream and the positions bucket, when this creates them
	logger   log.Logger
	js       jetstream.JetStream // nil when JetStream is disabled (core NATS)
	setupMu  sync.Mutex
	// setUpIn is the connection's Generation when the stream was last created or checked, plus
	// one (0: not set up on this generation): a reconnect may reach a server (a fresh one) that
	// lacks it, and a stream that refuses atomic batches is set up again.
	setUpIn atomic.Uint64
	// atomic says the stream takes atomic batches (allow_atomic, nats-server 2.12+); expect that
	// the server enforces an expected last sequence over a subject filter (2.11+). Both are
	// learnt when the stream is set up.
	atomic, expect atomic.Bool
	featuresShown  bool // learnFeatures logged once; guarded by setupMu
	// maxMsgSize is the stream's max_msg_size (0: none), learnt when it is set up.
	maxMsgSize atomic.Int64
}

// messageLimit is the largest message (headers and body) the server and the stream take now: the
// server's max_payload, or the stream's max_msg_size when smaller. 0 when not known (not
// connected): message then leaves bodies as they are, and the publish fails and is retried.
func (s *Stream) messageLimit() int {
	limit := int64(0)
	if nc := s.conn.NATS(); nc != nil && nc.IsConnected() {
		limit = nc.MaxPayload()
	}
	if m := s.maxMsgSize.Load(); m > 0 && (limit <= 0 || m < limit) {
		limit = m
	}
	return int(limit)
}

// NewStream returns the events stream of cfg on conn (the connection made with cfg). replicas
// are those of the stream and the positions bucket when it creates them (at least 1); logger is
// the connection's.
func NewStream(conn *natsconn.Conn, cfg config.NATS, replicas int, logger log.Logger) *Stream {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	s := &Stream{conn: conn, cfg: cfg, replicas: max(replicas, 1), logger: logger}
	if cfg.JetStream.Enabled {
		s.js, _ = conn.JetStream() // made by natsconn.Connect: cannot fail
	}
	return s
}

// Verify sets up the events stream now when NATS answers, and fails only when the stream
// contradicts the configuration (missing with create_stream false, subjects not covered): a
// reload or start refuses such a configuration. NATS unreachable, or any other failure, is left
// to the forwarders, which retry with backoff.
func (s *Stream) Verify(ctx context.Context) error {
	if err := s.setUp(ctx); errors.Is(err, errStreamConfig) {
		return err
	}
	return nil
}

// setUp creates or checks the stream once per generation of the connection; until it succeeds,
// nothing is published.
// It is called from each forwarder's loop, which retries it with backoff.
func (s *Stream) setUp(ctx context.Context) error {
	if !s.conn.Connected() {
		return s.conn.NotConnected()
	}
	// Read before the stream is checked: a reconnect meanwhile makes the next call check again.
	gen := s.conn.Generation() + 1
	if s.js == nil || s.setUpIn.Load() == gen {
		return nil
	}
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	if s.setUpIn.Load() == gen {
		return nil
	}
	cfg := s.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.JetStream.PublishTimeout)
	defer cancel()
	sc, err := s.ensure(ctx)
	if err != nil {
		return fmt.Errorf("couldn't set up stream %s on NATS at %s: %w", cfg.JetStream.Stream, s.conn.URL(), err)
	}
	s.learnFeatures(sc)
	s.setUpIn.Store(gen)
	return nil
}

// learnFeatures decides how publishes are guarded on this stream and server, and says once per
// change what is missing for the full guarantee.
func (s *Stream) learnFeatures(sc jetstream.StreamConfig) {
	v := s.conn.NATS().ConnectedServerVersion()
	s.maxMsgSize.Store(max(int64(sc.MaxMsgSize), 0))
	expect := serverAtLeast(v, 2, 11)
	atomicOK := expect && sc.AllowAtomicPublish && serverAtLeast(v, 2, 12)
	wasExpect, wasAtomic := s.expect.Swap(expect), s.atomic.Swap(atomicOK)
	switch {
	case !expect && (wasExpect || !s.featuresShown):
		level.Warn(s.logger).Log("msg", "the NATS server is older than 2.11: publishes carry no expectation the stream enforces, and only the duplicate window guards against publishing twice; upgrade NATS",
			"server_version", v)
	case expect && !atomicOK && (wasAtomic || !s.featuresShown):
		level.Warn(s.logger).Log("msg", "the stream does not take atomic batches: events are published one at a time, each checked by the stream (slower); set allow_atomic on the stream (nats-server 2.12+)",
			"stream", sc.Name, "server_version", v)
	}
	s.featuresShown = true
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

func (s *Stream) atomicBatches() bool { return s.atomic.Load() }
func (s *Stream) expectations() bool  { return s.expect.Load() }

// noAtomic follows the stream refusing atomic batches (allow_atomic turned off): set up again,
// which also says so.
func (s *Stream) noAtomic() {
	s.atomic.Store(false)
	s.setUpIn.Store(0)
}

// errStreamConfig is a stream that NATS answered for but that does not fit the configuration.
var errStreamConfig = errors.New("stream does not fit the configuration")

// ensure creates the stream when it does not exist (create_stream) and otherwise only checks it:
// the stream is usually provisioned with its own limits (deploy/nats/stream.json: max_age,
// max_bytes, ...), which an update from here would reset to unlimited.
func (s *Stream) ensure(ctx context.Context) (jetstream.StreamConfig, error) {
	cfg := s.cfg
	name := cfg.JetStream.Stream
	subject := cfg.SubjectPrefix + ".>"
	dw := cfg.JetStream.DuplicateWindow
	if dw <= 0 {
		dw = time.Hour
	}
	// One attempt: the forwarder's loop retries with backoff (the server may still be
	// recovering its store right after a restart, or be away).
	st, err := s.js.Stream(ctx, name)
	if err == nil {
		sc := st.CachedInfo().Config
		return sc, checkStream(sc, subject)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return jetstream.StreamConfig{}, err
	}
	if !cfg.JetStream.CreateStream {
		return jetstream.StreamConfig{}, fmt.Errorf("%w: stream %s does not exist and nats.jetstream.create_stream is false", errStreamConfig, name)
	}
	sc := jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Duplicates: dw, Storage: jetstream.FileStorage, Replicas: s.replicas,
		// Atomic batches carry the expectation that fences publishing (publish.go); a server
		// older than 2.12 refuses the field, so it is asked for only where it is known.
		AllowAtomicPublish: serverAtLeast(s.conn.NATS().ConnectedServerVersion(), 2, 12),
	}
	if _, err = s.js.CreateStream(ctx, sc); err != nil {
		// Already in use: another instance created it meanwhile; the retry checks it.
		return jetstream.StreamConfig{}, err
	}
	level.Info(s.logger).Log("msg", "created JetStream stream", "stream", name, "subjects", subject, "duplicate_window", dw, "replicas", s.replicas, "allow_atomic", sc.AllowAtomicPublish)
	return sc, nil
}

// checkStream verifies an existing stream without changing it: subjects not captured would lose
// every event. (A short duplicate window is no concern: each publish carries an expectation the
// stream enforces, publish.go.)
func checkStream(sc jetstream.StreamConfig, subject string) error {
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
