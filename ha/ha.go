package ha

// The Coordinator: its options, its loop (watch, tick, heartbeat) and the leases it holds.

import (
	"context"
	"encoding/json"
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

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
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

// Coordinator holds and hands over this replica's leases; see the package comment.
type Coordinator struct {
	js                jetstream.JetStream
	opts              Options
	logger            log.Logger
	ttl, tick, margin time.Duration
	nonce             string
	started           time.Time

	kickCh    chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
	runMu     sync.Mutex
	running   bool
	closed    bool

	mu          sync.Mutex
	controllers []string // sorted, unique
	view        view
	held        map[string]*Lease
	releasing   map[string]bool // released, its controller not yet stopped (drop)
	releases    sync.WaitGroup  // of releasing
	transitions map[string]uint64
	lapses      map[string]uint64 // leases that ran out before a renewal was answered (lapse.go)
	lastLapse   time.Time
	lapse       runstatus.Outage // logs a run of lapses
	lastErr     string
	outage      runstatus.Outage                            // logs a run of failures to reach the bucket
	beforeTick  func()                                      // set by tests before Run: runs at the start of every renew period
	wrapKV      func(jetstream.KeyValue) jetstream.KeyValue // set by tests before Run: a slow bucket
	announce    bool                                        // controllers changed since the last announcement
	dupWarned   bool

	heartbeatRev uint64    // c.mu: our last announcement
	heartbeatAt  time.Time // c.mu: when it was answered
	// gate is held by the loop while it acts and by the renewer around beforeTick, so that a
	// test's paused replica pauses whole.
	gate sync.Mutex

	// Used by Run's goroutine only.
	joined    time.Time          // first announcement: free leases wait a renew period (plan)
	attempts  map[string]attempt // by key: acquisitions whose reply was lost
	watchStop func()
	wake      *time.Timer // kicks the loop when the view's next record runs out

	descs descs
}

// attempt is an acquisition sent without an answer; if the bucket shows it, it was applied.
type attempt struct {
	id   string
	sent time.Time
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
	c := &Coordinator{
		js: js, opts: opts, ttl: opts.LeaseTTL, tick: opts.LeaseTTL / 3, margin: opts.LeaseTTL / 5,
		logger: log.With(opts.Logger, "component", "ha", "instance", opts.Instance),
		nonce:  uuid.NewString(), started: time.Now(),
		kickCh: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		controllers: normalize(opts.Controllers),
		view:        view{entries: map[string]*entry{}},
		held:        map[string]*Lease{}, releasing: map[string]bool{}, transitions: map[string]uint64{}, lapses: map[string]uint64{}, attempts: map[string]attempt{},
		descs: newDescs(),
	}
	c.outage.Logger = c.logger
	c.lapse.Logger, c.lapse.Remind = c.logger, lapseRemind
	return c, nil
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
	l := c.held[controller]
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
	c.controllers = normalize(names)
	c.announce = true
	c.mu.Unlock()
	c.kick()
}

// Close releases every lease at once (after OnRelease of each) and removes this replica from
// the bucket, so the others take its controllers over at once; Run returns. For SIGTERM.
func (c *Coordinator) Close() {
	c.runMu.Lock()
	c.closed = true
	running := c.running
	c.runMu.Unlock()
	c.closeOnce.Do(func() { close(c.closing) })
	if running {
		<-c.done
	}
}

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
	c.runMu.Lock()
	if c.closed || c.running {
		c.runMu.Unlock()
		return
	}
	c.running = true
	c.runMu.Unlock()
	defer close(c.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kv := c.open(ctx)
	if kv == nil {
		return
	}
	if c.wrapKV != nil {
		kv = c.wrapKV(kv)
	}
	c.startWatch(ctx, kv)
	defer func() { c.watchStop() }()
	defer c.wakeAt(time.Time{})
	for !c.synced() {
		select {
		case <-c.kickCh:
		case <-ctx.Done():
			return
		case <-c.closing:
			return
		}
	}
	// Announce before the first round, then renew and announce on a goroutine of its own. A
	// replica came when it sent its announcement, not when the answer was read: another may
	// see it, release a lease for it and have the delete reach our watch first, and that lease
	// was freed after we came.
	c.joined = time.Now()
	c.heartbeat(ctx, kv)
	stopKeep := make(chan struct{})
	keeping := make(chan struct{})
	go func() { defer close(keeping); c.keepAlive(ctx, kv, stopKeep) }()
	endKeep := func() { close(stopKeep); <-keeping }
	ticker := time.NewTicker(c.tick)
	defer ticker.Stop()
	c.onTick(ctx, kv)
	for {
		select {
		case <-ctx.Done():
			endKeep()
			c.stop(kv, false)
			return
		case <-c.closing:
			endKeep()
			c.stop(kv, true)
			return
		case <-ticker.C:
			c.onTick(ctx, kv)
		case <-c.kickCh:
			c.gate.Lock()
			c.reconcile(ctx, kv)
			c.gate.Unlock()
		}
	}
}

func (c *Coordinator) synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view.synced
}

// open returns the bucket, creating it when absent; nil once stopped.
func (c *Coordinator) open(ctx context.Context) jetstream.KeyValue {
	for {
		kv, err := c.openOnce(ctx)
		if err == nil {
			return kv
		}
		c.setErr("couldn't open bucket "+c.opts.Bucket, err)
		t := time.NewTimer(c.tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.closing:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Coordinator) openOnce(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, max(c.tick, 2*time.Second))
	defer cancel()
	kv, err := c.js.KeyValue(ctx, c.opts.Bucket)
	if err == nil {
		// A bucket made for a much shorter lease_ttl would drop keys between two renewals.
		if st, serr := kv.Status(ctx); serr == nil && st.TTL() > 0 && st.TTL() < 3*c.ttl {
			level.Warn(c.logger).Log("msg", "lease bucket drops keys sooner than 3 lease times; recreate it", "bucket", c.opts.Bucket, "bucket_ttl", st.TTL(), "lease_ttl", c.ttl)
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
		TTL: max(10*c.ttl, time.Minute),
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return c.js.KeyValue(ctx, c.opts.Bucket)
	}
	if err == nil {
		level.Info(c.logger).Log("msg", "created lease bucket", "bucket", c.opts.Bucket, "replicas", c.opts.Replicas)
	}
	return kv, err
}

// startWatch follows the bucket into the view, kicking the loop on every change; it restarts
// the watch when it ends.
func (c *Coordinator) startWatch(ctx context.Context, kv jetstream.KeyValue) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			w, err := kv.WatchAll(wctx)
			if err != nil {
				c.setErr("couldn't watch bucket "+c.opts.Bucket, err)
				t := time.NewTimer(c.tick)
				select {
				case <-wctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			c.follow(wctx, w)
			_ = w.Stop()
		}
	}()
	c.watchStop = func() { cancel(); <-done }
}

func (c *Coordinator) follow(ctx context.Context, w jetstream.KeyWatcher) {
	ownKey := instancePrefix + c.opts.Instance
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			now := time.Now()
			c.mu.Lock()
			if e == nil {
				if !c.view.synced {
					c.view.synced, c.view.syncedAt = true, now
				}
			} else {
				c.view.maxRev = max(c.view.maxRev, e.Revision())
				c.view.apply(e.Key(), e.Revision(), e.Operation(), e.Value(), now)
				if v := c.view.entries[e.Key()]; e.Key() == ownKey && v.inst != nil && v.inst.Nonce != c.nonce && !c.dupWarned {
					c.dupWarned = true
					level.Error(c.logger).Log("msg", "another replica uses the same instance id; give each replica its own ha.instance", "bucket", c.opts.Bucket)
				}
			}
			c.mu.Unlock()
			c.kick()
		}
	}
}

// onTick is the loop's period: check the watch, then act. Announcing and renewing are the
// renewer's (keepAlive), never behind the loop's own calls to the bucket.
func (c *Coordinator) onTick(ctx context.Context, kv jetstream.KeyValue) {
	c.gate.Lock()
	defer c.gate.Unlock()
	c.checkWatch(ctx, kv)
	c.reconcile(ctx, kv)
}

// checkWatch restarts a watch that did not deliver our own announcement of a period ago: the
// view would otherwise go stale silently.
func (c *Coordinator) checkWatch(ctx context.Context, kv jetstream.KeyValue) {
	c.mu.Lock()
	stale := c.heartbeatRev != 0 && time.Since(c.heartbeatAt) >= c.tick && c.view.maxRev < c.heartbeatRev
	c.mu.Unlock()
	if stale {
		level.Warn(c.logger).Log("msg", "bucket watch fell behind; restarting it", "bucket", c.opts.Bucket)
		c.watchStop()
		c.startWatch(ctx, kv)
	}
}

func (c *Coordinator) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.tick)
}

// heartbeat announces this replica and its controllers.
func (c *Coordinator) heartbeat(ctx context.Context, kv jetstream.KeyValue) {
	c.mu.Lock()
	rec := instanceRecord{Instance: c.opts.Instance, Nonce: c.nonce, Started: c.started, Renewed: time.Now(), Controllers: c.controllers}
	c.announce = false
	c.mu.Unlock()
	b, _ := json.Marshal(rec)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	key := instancePrefix + c.opts.Instance
	rev, err := kv.Put(cctx, key, b)
	if err != nil {
		c.mu.Lock()
		c.announce = true
		c.mu.Unlock()
		c.setErr("couldn't announce this replica", err)
		return
	}
	c.mu.Lock()
	if rev > c.heartbeatRev {
		c.heartbeatRev, c.heartbeatAt = rev, time.Now()
	}
	c.view.apply(key, rev, jetstream.KeyValuePut, b, time.Now())
	c.lastErr = ""
	c.mu.Unlock()
	c.outage.Recover(time.Now(), "lease bucket reachable again", "bucket", c.opts.Bucket)
}

func (c *Coordinator) setErr(what string, err error) {
	c.mu.Lock()
	c.lastErr = what + ": " + err.Error()
	c.mu.Unlock()
	if !c.outage.Fail(time.Now(), level.Warn, what+"; retrying every lease_ttl/3", err, "bucket", c.opts.Bucket) {
		level.Debug(c.logger).Log("msg", what, "err", err)
	}
}

func (c *Coordinator) heldLeases() []*Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Lease, 0, len(c.held))
	for _, l := range c.held {
		out = append(out, l)
	}
	return out
}
