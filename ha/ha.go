package ha

// The Coordinator: its options, its public methods, what its parts share, and opening the bucket.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configures a Coordinator.
type Options struct {
	// The ha section's values (config holds their defaults and bounds).
	Bucket   string
	Replicas int           // replicas of a bucket created here
	LeaseTTL time.Duration // > 0
	Instance string        // this replica's id ([A-Za-z0-9_-]); default DefaultInstance()
	// Controllers are the names this replica is configured with (SetControllers changes them).
	Controllers []string
	Logger      log.Logger
	// OnAcquire starts the controller under l.Context(); it must not block.
	OnAcquire func(l *Lease)
	// OnRelease stops the controller: it must not block, and returns what to wait for until
	// nothing runs for the controller any more (nil: nothing). The coordinator waits for that
	// off its loop, so that a controller slow to stop delays no other lease's renewal; the
	// lease's key is deleted, and the controller acquired again, only once it returned.
	OnRelease func(controller string) (stopped func())
}

// DefaultInstance is hostname-pid, with characters a bucket key cannot hold replaced by '_'.
func DefaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "veil-exporter"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, host+"-"+strconv.Itoa(os.Getpid()))
}

// Coordinator holds and hands over this replica's leases; see the package comment. It is made
// of parts: the lease table (table.go: what this replica knows and holds, and the rules, no
// I/O), the loop that talks to the bucket (reconcile.go, with its watch and renewer), and the
// observer (status.go); it keeps what they share, under mu.
type Coordinator struct {
	js      jetstream.JetStream
	opts    Options
	logger  log.Logger
	nonce   string    // this process, in its announcements
	started time.Time // shown as this replica's start
	life    lifecycle
	kickCh  chan struct{} // wakes the loop for another look
	obs     *observer

	mu     sync.Mutex
	table  table             // mu
	leases map[string]*Lease // mu: the held leases, as the table's held
	// gate is held by the loop while it acts and by the renewer around hooks.beforeTick, so
	// that a test's paused replica pauses whole.
	gate  sync.Mutex
	hooks testHooks
}

// testHooks are set by tests before Run.
type testHooks struct {
	beforeTick func()                                      // runs at the start of every renew period
	wrapKV     func(jetstream.KeyValue) jetstream.KeyValue // a slow bucket
}

// lifecycle is Run's and Close's: Run runs once, and not after Close; Close waits for it.
type lifecycle struct {
	mu        sync.Mutex
	running   bool
	closed    bool
	closing   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// begin reports whether Run may go on (first call, not closed).
func (lc *lifecycle) begin() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed || lc.running {
		return false
	}
	lc.running = true
	return true
}

// close asks Run to end and waits until it has, when it runs.
func (lc *lifecycle) close() {
	lc.mu.Lock()
	lc.closed = true
	running := lc.running
	lc.mu.Unlock()
	lc.closeOnce.Do(func() { close(lc.closing) })
	if running {
		<-lc.done
	}
}

// New checks the options and makes the coordinator's own JetStream context on nc; Run starts
// the coordination.
func New(nc *nats.Conn, opts Options) (*Coordinator, error) {
	if nc == nil {
		return nil, errors.New("ha: no NATS connection")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	if opts.LeaseTTL <= 0 {
		return nil, fmt.Errorf("ha: lease TTL %v is not positive", opts.LeaseTTL)
	}
	if opts.Instance == "" {
		opts.Instance = DefaultInstance()
	}
	if keyToken(opts.Instance) != opts.Instance {
		return nil, fmt.Errorf("ha: instance %q must be letters, digits, '_' or '-'", opts.Instance)
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	if opts.OnAcquire == nil {
		opts.OnAcquire = func(*Lease) {}
	}
	if opts.OnRelease == nil {
		opts.OnRelease = func(string) func() { return nil }
	}
	logger := log.With(opts.Logger, "component", "ha", "instance", opts.Instance)
	return &Coordinator{
		js: js, opts: opts, logger: logger, nonce: uuid.NewString(), started: time.Now(),
		life:   lifecycle{closing: make(chan struct{}), done: make(chan struct{})},
		kickCh: make(chan struct{}, 1), obs: newObserver(logger, opts.Bucket),
		table: newTable(opts.Instance, opts.LeaseTTL, opts.Controllers), leases: map[string]*Lease{},
	}, nil
}

func normalize(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

func leaseKey(controller string) string { return leasePrefix + keyToken(controller) }

// Instance is this replica's id in the bucket.
func (c *Coordinator) Instance() string { return c.opts.Instance }

// Lease is this replica's valid lease of controller, nil when it does not hold one.
func (c *Coordinator) Lease(controller string) *Lease {
	c.mu.Lock()
	l := c.leases[controller]
	c.mu.Unlock()
	if l == nil || !l.Valid() {
		return nil
	}
	return l
}

// SetControllers replaces the controllers this replica is configured with (a reload): it
// announces them, and releases held ones no longer among them.
func (c *Coordinator) SetControllers(names []string) {
	c.mu.Lock()
	c.table.configure(names)
	c.mu.Unlock()
	c.kick()
}

// Close releases every lease at once (after OnRelease of each) and removes this replica from
// the bucket, so the others take its controllers over at once; Run returns. For SIGTERM.
func (c *Coordinator) Close() { c.life.close() }

func (c *Coordinator) kick() {
	select {
	case c.kickCh <- struct{}{}:
	default:
	}
}

// Run coordinates until ctx is done (leases are then let go here but left to expire in the
// bucket, as if the process died) or Close is called. It opens the bucket, creating it if
// absent, and retries for as long as NATS is unreachable.
func (c *Coordinator) Run(ctx context.Context) {
	if !c.life.begin() {
		return
	}
	defer close(c.life.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kv := c.open(ctx)
	if kv == nil {
		return
	}
	if c.hooks.wrapKV != nil {
		kv = c.hooks.wrapKV(kv)
	}
	newLoop(c, kv).run(ctx)
}

// open returns the bucket, creating it when absent; nil once stopped.
func (c *Coordinator) open(ctx context.Context) jetstream.KeyValue {
	for {
		kv, err := c.openOnce(ctx)
		if err == nil {
			return kv
		}
		c.obs.fail("couldn't open bucket "+c.opts.Bucket, err)
		t := time.NewTimer(c.table.tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.life.closing:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Coordinator) openOnce(ctx context.Context) (jetstream.KeyValue, error) {
	ttl := c.table.ttl
	ctx, cancel := context.WithTimeout(ctx, max(c.table.tick, 2*time.Second))
	defer cancel()
	kv, err := c.js.KeyValue(ctx, c.opts.Bucket)
	if err == nil {
		// A bucket made for a much shorter lease_ttl would drop keys between two renewals.
		if st, serr := kv.Status(ctx); serr == nil && st.TTL() > 0 && st.TTL() < 3*ttl {
			level.Warn(c.logger).Log("msg", "lease bucket drops keys sooner than 3 lease times; recreate it", "bucket", c.opts.Bucket, "bucket_ttl", st.TTL(), "lease_ttl", ttl)
		}
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = c.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.opts.Bucket,
		Description: "veil-exporter: which replica runs which controller",
		History:     1,
		Replicas:    c.opts.Replicas,
		Storage:     jetstream.FileStorage,
		// Records of replicas long gone vanish; live ones are rewritten every lease_ttl/3.
		TTL: max(10*ttl, time.Minute),
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return c.js.KeyValue(ctx, c.opts.Bucket)
	}
	if err == nil {
		level.Info(c.logger).Log("msg", "created lease bucket", "bucket", c.opts.Bucket, "replicas", c.opts.Replicas)
	}
	return kv, err
}

// synced says whether the watch has delivered the bucket's content.
func (c *Coordinator) synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.table.view.synced
}

// callCtx bounds one call to the bucket by the renew period.
func (c *Coordinator) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.table.tick)
}

// heldLeases are the leases this replica holds now.
func (c *Coordinator) heldLeases() []*Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		out = append(out, l)
	}
	return out
}
