package forwarder

// The Forwarder: its options and the loop that polls, publishes and saves (what it reports is
// in status.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Options configures a Forwarder for one controller.
type Options struct {
	Controller    string
	ControllerURL string
	Client        *veil.Client
	Events        config.Events
	// Stream is the events stream on the NATS connection, shared by every forwarder on it.
	Stream *Stream
	Logger log.Logger
	// Concurrency is how many pages a catch-up reads at once: the controller's max_concurrency
	// (the client's own limit applies anyway). 0 means 4.
	Concurrency int
	// Fence, with replicas, says whether this replica still holds the controller's lease: it is
	// asked right before each publish and each save of the position, and when it says no the
	// forwarder does neither and waits until it says yes again (a renewal regained the lease)
	// or ctx ends (the lease ended). nil: always (one replica).
	Fence func() bool
}

// Forwarder tails one controller's events and publishes them. It is a small core (Run's loop and
// its cycle, cycle.go) over named parts: the position (position.go), what has been published,
// which only it holds; the reader of the journal's pages (tail.go, locate.go); the stream side it
// publishes to and reads the position back from (streamside.go, pipeline.go, publish.go,
// streampos.go; the position store, checkpoint.go); and the observer, which counts and reports
// what both do (observer.go, status.go, rejected.go).
//
// fw.mu guards the position and the stream side's state, which must agree (the sequence the
// next publish expects is the position's newest message). The observer has a mutex of its own,
// taken after fw.mu, never before.
type Forwarder struct {
	opts   Options
	logger log.Logger
	cp     checkpoint
	source string // ce-source: the controller URL without userinfo
	// clock is the exporter's clock (time.Now; a test's own): what is dated after it is ahead.
	clock func() time.Time

	reader journalReader
	out    streamSide
	obs    *observer

	mu  sync.Mutex
	pos position // acknowledged
}

// New checks the options and builds the forwarder; Run starts it.
func New(opts Options) (*Forwarder, error) { return newForwarder(opts, nil) }

// newForwarder is New with the position store cp instead of the one opts.Events.Checkpoint
// chooses when cp is not nil (tests).
func newForwarder(opts Options, cp checkpoint) (*Forwarder, error) {
	if opts.Controller == "" {
		return nil, errors.New("forwarder: controller name is empty")
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	fw := &Forwarder{opts: opts, logger: log.With(opts.Logger, "controller", opts.Controller, "component", "events"),
		source: eventSource(opts.ControllerURL), clock: time.Now}
	if opts.Client == nil {
		return nil, errors.New("forwarder: no platform client")
	}
	if err := fw.reader.init(opts, fw.logger); err != nil {
		return nil, err
	}
	if opts.Stream == nil {
		return nil, errors.New("forwarder: no NATS connection")
	}
	fw.out.init(opts.Stream, opts.Controller, fw.logger)
	fw.cp = cp
	if fw.cp == nil {
		var err error
		switch opts.Events.Checkpoint.Store {
		case "file":
			fw.cp, err = newFileCheckpoint(opts.Events.Checkpoint.Dir, opts.Controller)
		case "nats_kv":
			fw.cp, err = newKVCheckpoint(opts.Stream, opts.Controller)
		default:
			err = fmt.Errorf("unknown checkpoint store %q", opts.Events.Checkpoint.Store)
		}
		if err != nil {
			return nil, fmt.Errorf("forwarder: %w", err)
		}
	}
	if opts.Fence != nil {
		fw.cp = fencedCheckpoint{fw.cp, opts.Fence}
	}
	c := prometheus.Labels{"controller": opts.Controller}
	// The veil_events_* values change as the forwarder polls the journal, not when scraped.
	const polled = " Updated by the event forwarder every events.poll_interval (more often while catching up)."
	fw.obs = newObserver(fw.logger, opts.Stream.conn, descs{
		published:     prometheus.NewDesc("veil_events_published_total", "Events published and acknowledged, by type (info, warning, error; any other type counts as other) and entity_class (of the first entity, none without one; at most 50 classes, further ones count as other)."+polled, []string{"type", "entity_class"}, c),
		rejected:      prometheus.NewDesc("veil_events_rejected_total", "Events published in another form than the controller sent them, by reason: too_large (body cut to fit NATS max_payload), long_token (type or entity class cut in the subject), no_id, bad_created, not_an_object (published to <subject_prefix>.<controller>.invalid). Each is logged once at warn with its id."+polled, []string{"reason"}, c),
		pubErrors:     prometheus.NewDesc("veil_events_publish_errors_total", "Failed publish attempts and position writes (retried)."+polled, nil, c),
		dups:          prometheus.NewDesc("veil_events_duplicates_total", "Events read again and dropped because they were already published."+polled, nil, c),
		gaps:          prometheus.NewDesc("veil_events_gaps_total", "Events lost at the source (deleted by retention) before they could be read: the exact count, or a lower bound when it is not known."+polled, nil, c),
		episodes:      prometheus.NewDesc("veil_events_gap_episodes_total", "Times the stored position's event was found deleted and continuity with it could not be proven: events may have been lost, how many is not known (veil_events_gaps_total has the lower bound)."+polled, nil, c),
		conflicts:     prometheus.NewDesc("veil_events_publish_conflicts_total", "Publishes the stream refused because its newest message of this controller was not the expected one (another replica published, or the stream holds other than the forwarder thought); the position is then read from the stream again."+polled, nil, c),
		adoptions:     prometheus.NewDesc("veil_events_position_adoptions_total", "Times the stored position was found written by another instance while this replica held the controller's lease (a former owner's late write, e.g. after it was paused past its lease); this replica stored its own over it and read the stream again."+polled, nil, c),
		rewinds:       prometheus.NewDesc("veil_events_rewinds_total", "Times the stream held less of this controller than the stored position (NATS lost acknowledged messages): the events in between were published again from the journal."+polled, nil, c),
		republished:   prometheus.NewDesc("veil_events_republished_total", "Events published again because the stream held less of this controller than the position (counted from the stored position at a start, so a lower bound after a crash)."+polled, nil, c),
		newestCreated: prometheus.NewDesc("veil_events_last_published_timestamp_seconds", "Created time of the newest published event (the stored position)."+polled, nil, c),
		backlog:       prometheus.NewDesc("veil_events_backlog", "Events known but not yet published; also counted while NATS is unreachable."+polled, nil, c),
		ahead:         prometheus.NewDesc("veil_events_ahead_of_clock", "Events published although dated after this machine's clock when they were read (the controller's clock runs ahead), which the position remembers by id until the clock passes them (at most 100,000; beyond, they are held back)."+polled, nil, c),
		held:          prometheus.NewDesc("veil_events_held_back", "Events dated after this machine's clock left unpublished by the last read because 100,000 such events are remembered already: each goes out once the clock passes it. Counted in veil_events_backlog too."+polled, nil, c),
		natsUp:        prometheus.NewDesc("veil_nats_connected", "1 if the event forwarder's NATS connection is up, read at scrape time.", nil, c),
	})
	fw.reader.obs = fw.obs
	return fw, nil
}

// Run tails and publishes until ctx is done. It returns an error only when it must stop
// forwarding for good (another instance owns the position).
func (fw *Forwarder) Run(ctx context.Context) error {
	pos, stop, err := fw.startPosition(ctx)
	if stop {
		return err
	}
	fw.mu.Lock()
	fw.pos = pos
	fw.mu.Unlock()
	var run runCounts
	for {
		if !fw.awaitFence(ctx) {
			return nil
		}
		start := time.Now()
		n, err := fw.cycle(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fw.obs.cycled(start, err)
		wait, stop, err := fw.afterCycle(ctx, &run, n, err)
		if stop {
			return err
		}
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// fencePoll is how often a forwarder whose lease ran out looks whether it was renewed.
const fencePoll = 50 * time.Millisecond

// awaitFence waits, while the fence says the lease ran out, until it is renewed; false when ctx
// ended first (the lease ended: the daemon stops the controller). Nothing is read from the
// controller or NATS meanwhile.
func (fw *Forwarder) awaitFence(ctx context.Context) bool {
	if fw.opts.Fence == nil || fw.opts.Fence() {
		return ctx.Err() == nil
	}
	fw.obs.fencedWait()
	fw.mu.Lock()
	fw.out.needSync = true // a batch may have been published whose position was not stored
	fw.mu.Unlock()
	for !fw.opts.Fence() {
		if !sleep(ctx, fencePoll) {
			return false
		}
	}
	return ctx.Err() == nil
}

// startPosition loads the stored position, retrying while the store cannot be read (the
// nats_kv store needs NATS: until it comes, nothing is forwarded, and /-/ready says why), and
// without one chooses the first position and saves it. stop says Run must return err.
func (fw *Forwarder) startPosition(ctx context.Context) (pos position, stop bool, err error) {
	pos, ok, err := fw.cp.Load(ctx)
	for delay := time.Second; err != nil; delay = min(2*delay, maxSetUpRetry) {
		fw.obs.setNotReady(err)
		fw.obs.fail(err)
		if !sleep(ctx, delay) {
			return pos, true, nil
		}
		pos, ok, err = fw.cp.Load(ctx)
	}
	fw.obs.setNotReady(nil)
	if ok {
		return pos, false, nil
	}
	for {
		pos, err = fw.initialPosition(ctx)
		if err == nil {
			err = fw.cp.Save(ctx, pos)
		}
		if err == nil {
			break
		}
		if errors.Is(err, errCheckpointConflict) {
			if !fw.adopt(ctx, err, 1) {
				return pos, true, fw.stop(err)
			}
			continue // the stored position read again: start from it, the stream decides
		}
		if errors.Is(err, errFenced) {
			if !fw.awaitFence(ctx) {
				return pos, true, nil
			}
			continue
		}
		fw.obs.fail(err)
		if !sleep(ctx, time.Second) {
			return pos, true, nil
		}
	}
	fw.obs.setNotReady(nil)
	return pos, false, nil
}

// runCounts are Run's failures in a row.
type runCounts struct {
	resyncs    int // cycles that ended in errResync
	setUpFails int // set-up failures with NATS connected
	adoptions  int // stored positions adopted without a cycle that ended well
}

// afterCycle decides from a cycle's outcome (n events read, err) how long to wait before the
// next one, or that Run stops (returning the error given).
func (fw *Forwarder) afterCycle(ctx context.Context, run *runCounts, n int, err error) (wait time.Duration, stop bool, _ error) {
	poll := fw.opts.Events.PollInterval
	if err == nil {
		run.adoptions = 0
	}
	if !errors.As(err, new(*setUpError)) {
		run.setUpFails = 0
	}
	if errors.Is(err, errResync) {
		run.resyncs++
	} else {
		run.resyncs = 0
	}
	switch {
	case errors.Is(err, errCheckpointConflict):
		run.adoptions++
		if !fw.adopt(ctx, err, run.adoptions) {
			return 0, true, fw.stop(err)
		}
		return poll, false, nil
	case errors.Is(err, errFenced):
		// The lease ran out: either another replica takes the controller over and the daemon
		// stops this one (ctx), or a renewal regains it and forwarding goes on, from what the
		// stream says (a batch may have been published whose position was not stored).
		return 0, false, nil // Run's awaitFence waits
	case errors.Is(err, errResync):
		// The reader widened its overlap: retry at once, then back off, so that a journal
		// moving faster than it can be read is not hammered.
		if run.resyncs > 1 {
			return min(poll, 10*time.Millisecond<<min(run.resyncs-2, 10)), false, nil
		}
		return 0, false, nil
	case errors.As(err, new(*setUpError)):
		// Connected, but the stream or the bucket cannot be set up (missing, refused,
		// JetStream disabled): back off, it is not mended by hammering.
		fw.obs.fail(err)
		run.setUpFails++
		return min(time.Second<<min(run.setUpFails-1, 5), maxSetUpRetry), false, nil
	case err != nil:
		fw.obs.fail(err)
		return min(poll, time.Second), false, nil
	case n >= fw.reader.page:
		return 0, false, nil // catching up: there may be more already
	}
	return poll, false, nil
}

// pageSize is the page size to read with: events.page_size (0: the platform's cap of 100), no
// smaller than a page that can both overlap the previous one and progress.
func pageSize(n int, logger log.Logger) int {
	switch {
	case n <= 0 || n > pageLimit:
		return pageLimit
	case n < minPage:
		level.Warn(logger).Log("msg", "events.page_size too small to overlap pages and progress; using the smallest that can", "page_size", n, "using", minPage)
		return minPage
	}
	return n
}

// maxSetUpRetry caps the backoff of retrying the stream and position store set-up.
const maxSetUpRetry = 30 * time.Second

// maxAdoptions is how many conflicts on the position in a row a lease holder answers by
// adopting it (adopt) before it stops as a forwarder without a lease does: a former owner leaves
// one or two late writes, another instance writing on and on is not one.
const maxAdoptions = 3

// adopt answers a conflict on the stored position (another instance wrote it) when this replica
// holds the controller's lease: the write was a former owner's, made before it learnt that its
// lease had ended (a paused process resumes with a save in flight; the fence is a clock, not a
// token the store checks). Stopping would leave the controller unforwarded while its lease is
// held; instead the stored position is read again (for its revision), ours is stored over it,
// and the stream is read before anything more is published: the stream, fenced by expected
// sequences, says where events stand, whatever the late write said. Without a lease, or after
// maxAdoptions conflicts in a row, it returns false and the forwarder stops.
func (fw *Forwarder) adopt(ctx context.Context, conflict error, inARow int) bool {
	if fw.opts.Fence == nil || !fw.opts.Fence() || inARow > maxAdoptions {
		return false
	}
	level.Warn(fw.logger).Log("msg", "the position was written by another instance while this replica holds the lease (a former owner's late write): reading it again and storing ours over it", "err", conflict)
	fw.obs.adopted()
	fw.mu.Lock()
	fw.out.needSync = true
	pos := fw.pos.clone()
	fw.mu.Unlock()
	if _, _, err := fw.cp.Load(ctx); err != nil {
		fw.obs.fail(err)
		return true // the next save conflicts again, or finds the store back
	}
	if !pos.Known {
		return true // nothing of ours to store yet: Run's first save does it
	}
	if err := fw.savePosition(ctx, pos); errors.Is(err, errCheckpointConflict) {
		return fw.adopt(ctx, err, inARow+1)
	}
	return true
}

// stop records that forwarding stops for good on err, and returns the error Run returns.
func (fw *Forwarder) stop(err error) error {
	fw.obs.stop(err)
	return fmt.Errorf("forwarder %s: %w", fw.opts.Controller, err)
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// initialPosition is where a first start begins: after the newest event (latest) or before
// everything (earliest).
func (fw *Forwarder) initialPosition(ctx context.Context) (position, error) {
	if fw.opts.Events.Start == "earliest" {
		return position{FromStart: true}, nil
	}
	j := &fw.reader
	pg, err := j.eventsPage(ctx, 0, j.page)
	if err != nil {
		return position{}, fmt.Errorf("couldn't read events: %w", err)
	}
	j.learnOrder(pg.Results)
	items := pg.Results
	if j.served() != newestFirst && pg.Count > len(items) {
		if pg, err = j.eventsPage(ctx, max(0, pg.Count-j.page), j.page); err != nil {
			return position{}, fmt.Errorf("couldn't read events: %w", err)
		}
		items = pg.Results
	}
	p := position{Known: true}
	for _, e := range items {
		if !p.Created.IsZero() && e.Created.Before(p.Created) {
			continue
		}
		p.advance(e.Created.Time, e.ID)
	}
	p.Known, p.FromStart = true, true
	level.Info(fw.logger).Log("msg", "no stored position; starting after the newest event unless the stream holds events of this controller", "created", p.Created)
	return p, nil
}
