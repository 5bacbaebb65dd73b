// PushFeed: one controller's push channel, kept open, its frames applied to the store in small
// batches.

package inventory

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/veil"
)

// Push modes of a controller, as the status page and veil_push_mode show them.
const (
	PushModeConnecting = "connecting" // dialling, or between attempts
	PushModePush       = "push"       // the socket is open: changes arrive as they happen
	PushModePolling    = "polling"    // the controller has no push channel: listed every collect.interval
)

// Timing of the feed; variables so that tests shorten them (export_test.go).
var (
	pushBatch        = 100 * time.Millisecond // frames applied together: at most one render per batch
	pushPing         = 30 * time.Second       // a silent socket is pinged this often
	pushBackoffFirst = time.Second            // the first wait after a failure, doubled up to pushBackoffMax
	pushBackoffMax   = 15 * time.Second       // the vendor's own client waits 15 s
	pushStable       = time.Minute            // a socket open this long resets the backoff
)

// pushBatchMax bounds the frames of one batch.
const pushBatchMax = 1000

// PushFeed keeps a controller's push channel open and applies its frames to a Store.
// Every (re)connect is followed by a full refresh, since frames sent while the socket was down
// are lost; a controller without the channel is polled as without the feed, and asked again
// every resync interval.
type PushFeed struct {
	controller string
	client     *veil.Client
	inv        *Store
	noPushWait time.Duration // between attempts on a controller without the channel
	logger     log.Logger
	outage     runstatus.Outage

	mu          sync.Mutex
	mode        string
	since       time.Time // of the mode
	applied     float64
	dropped     map[PushDrop]float64
	connects    float64
	lastFrame   time.Time
	lastErr     string
	lastConnect time.Time
	noPushSaid  bool

	descs pushDescs
}

type pushDescs struct {
	mode, applied, dropped, connects, lastFrame *prometheus.Desc
}

// NewPushFeed returns the push feed of inv's controller.
func NewPushFeed(controller string, client *veil.Client, inv *Store, resync time.Duration, logger log.Logger) *PushFeed {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	f := &PushFeed{
		controller: controller, client: client, inv: inv, noPushWait: resync,
		logger: log.With(logger, "controller", controller),
		mode:   PushModeConnecting, since: time.Now(), dropped: map[PushDrop]float64{},
	}
	f.outage.Logger, f.outage.EachCause = f.logger, true
	inv.pacing.dialed = make(chan struct{}) // the store's first refresh waits for the first dial
	c := prometheus.Labels{"controller": controller}
	f.descs = pushDescs{
		mode:      prometheus.NewDesc("veil_push_mode", "How the inventory of the controller is kept fresh, 1 for the current mode: push (the controller's push channel is open: changes within a second), polling (the controller has no push channel: listed every collect.interval) or connecting.", []string{"mode"}, c),
		applied:   prometheus.NewDesc("veil_push_frames_total", "Frames of the push channel applied to the inventory.", nil, c),
		dropped:   prometheus.NewDesc("veil_push_frames_dropped_total", "Frames of the push channel dropped, by reason: not_json, no_id, unknown_event, unknown_resource, bad_object (the object does not decode), too_large (over 4 MiB: the socket is reopened and the inventory listed again). The next full refresh corrects what they would have changed.", []string{"reason"}, c),
		connects:  prometheus.NewDesc("veil_push_connects_total", "Times the push channel was opened and answered on (a frame, or the pong of the ping sent at once); each is followed by a full refresh of the inventory.", nil, c),
		lastFrame: prometheus.NewDesc("veil_push_last_frame_timestamp_seconds", "When the last frame of the push channel was applied (0: none yet).", nil, c),
	}
	return f
}

// Run keeps the channel open until ctx is done.
func (f *PushFeed) Run(ctx context.Context) {
	backoff := pushBackoffFirst
	// dialed tells the store's first refresh, once, that the first dial ended: after connected()
	// it lists with the socket open, after a failure without one.
	var once sync.Once
	dialed := func() { once.Do(func() { close(f.inv.pacing.dialed) }) }
	defer dialed()
	for ctx.Err() == nil {
		p, err := f.client.DialPush(ctx, f.inv.PushResources())
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, veil.ErrNoPush):
			f.noPush(err)
			dialed()
			if !sleepCtx(ctx, f.noPushWait) {
				return
			}
			continue
		case err != nil:
			backoff = f.retry(err, backoff)
			dialed()
			if !sleepCtx(ctx, jittered(backoff)) {
				return
			}
			backoff = min(2*backoff, pushBackoffMax)
			continue
		}
		// The socket counts as open once the controller has shown it serves it: a frame, or the
		// answer to a ping sent at once. A controller refusing the token accepts the socket and
		// says so in its first frame; counted as opened, every retry would log the channel open
		// again and then lost again.
		opened := time.Now()
		err = f.read(ctx, p, func() {
			opened = time.Now()
			f.connected()
			dialed()
		})
		dialed()
		p.Close()
		f.inv.SetPushed(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, veil.ErrPushFrameTooBig) {
			f.drop(DropTooLarge, 1)
			f.client.Reject(veil.Rejection{Collection: "push", Reason: veil.RejectOverLimit, Err: err})
		}
		// A socket that lived a while starts the backoff again; one closed at once (a proxy
		// that accepts and hangs up, a frame too big every time) keeps doubling it, so each
		// reconnect's full listing comes at most every pushBackoffMax.
		if time.Since(opened) >= pushStable {
			backoff = pushBackoffFirst
		}
		backoff = f.retry(err, backoff)
		if !sleepCtx(ctx, jittered(backoff)) {
			return
		}
		backoff = min(2*backoff, pushBackoffMax)
	}
}

// retry records a failure and returns the wait before the next attempt: pushBackoffMax after a
// refused token (re-read from its file first), else backoff.
func (f *PushFeed) retry(err error, backoff time.Duration) time.Duration {
	if errors.Is(err, veil.ErrUnauthorized) {
		if rerr := f.client.ReloadToken(); rerr != nil {
			level.Debug(f.logger).Log("msg", "couldn't reload token", "err", rerr)
		}
		backoff = pushBackoffMax
	}
	f.failed(err)
	return backoff
}

// connected: the inventory is listed again now, and its pushed collections then only every
// resync interval.
func (f *PushFeed) connected() {
	now := time.Now()
	f.mu.Lock()
	f.mode, f.since, f.lastErr, f.lastConnect = PushModePush, now, "", now
	f.connects++
	f.noPushSaid = false
	f.mu.Unlock()
	f.inv.SetPushed(true)
	f.inv.Resync()
	if !f.outage.Recover(now, "push channel open again: inventory changes arrive as they happen") {
		level.Info(f.logger).Log("msg", "push channel open: inventory changes arrive as they happen")
	}
}

func (f *PushFeed) failed(err error) {
	now := time.Now()
	f.mu.Lock()
	if f.mode != PushModeConnecting {
		f.mode, f.since = PushModeConnecting, now
	}
	f.lastErr = err.Error()
	f.mu.Unlock()
	f.inv.SetPushed(false)
	f.outage.Fail(now, level.Warn, "push channel lost: inventory listed every collect.interval until it is back", err)
}

func (f *PushFeed) noPush(err error) {
	now := time.Now()
	f.mu.Lock()
	said := f.noPushSaid
	if f.mode != PushModePolling {
		f.mode, f.since = PushModePolling, now
	}
	f.lastErr, f.noPushSaid = "", true
	f.mu.Unlock()
	f.inv.SetPushed(false)
	f.outage.Recover(now, "push channel answered: the controller has none")
	if !said {
		level.Info(f.logger).Log("msg", "controller has no push channel: inventory listed every collect.interval (asked again every collect.resync_interval)", "reason", err)
	}
}

// read applies the socket's frames in batches until it fails or ctx is done. It calls open, once,
// when the first frame arrives or the first ping, sent at once, is answered.
func (f *PushFeed) read(ctx context.Context, p *veil.Push, open func()) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan veil.PushFrame, pushBatchMax)
	errc := make(chan error, 1)
	alive := make(chan struct{})
	var aliveOnce sync.Once
	served := func() { aliveOnce.Do(func() { close(alive) }) }
	go f.receive(rctx, p, frames, errc, served)
	pinged := make(chan error, 1)
	go func() {
		pctx, pcancel := context.WithTimeout(rctx, pushPing/2)
		defer pcancel()
		pinged <- p.Ping(pctx)
	}()
	ping := time.NewTicker(pushPing)
	defer ping.Stop()
	var batch []veil.PushFrame
	var flush <-chan time.Time
	for {
		select {
		case <-alive:
			open()
			alive = nil
		case err := <-pinged:
			if err != nil && alive != nil {
				return err // neither a frame nor a pong: the socket is not served
			}
			served()
		case fr, ok := <-frames:
			if !ok {
				f.apply(batch)
				select {
				case err := <-errc:
					return err
				default:
					return ctx.Err()
				}
			}
			if batch == nil {
				flush = time.After(pushBatch)
			}
			batch = append(batch, fr)
			if len(batch) >= pushBatchMax {
				f.apply(batch)
				batch, flush = nil, nil
			}
		case <-flush:
			f.apply(batch)
			batch, flush = nil, nil
		case <-ping.C:
			pctx, pcancel := context.WithTimeout(rctx, pushPing/2)
			err := p.Ping(pctx)
			pcancel()
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// receive hands the socket's frames to read until it fails (the error to errc) or ctx is done;
// served is called at each frame, usable or not.
func (f *PushFeed) receive(ctx context.Context, p *veil.Push, frames chan<- veil.PushFrame, errc chan<- error, served func()) {
	defer close(frames)
	for {
		fr, err := p.Next(ctx)
		var bad *veil.PushBadFrameError
		if errors.As(err, &bad) {
			served()
			f.drop(PushDrop(bad.Reason), 1)
			continue
		}
		if err != nil {
			errc <- err
			return
		}
		served()
		select {
		case frames <- fr:
		case <-ctx.Done():
			return
		}
	}
}

func (f *PushFeed) apply(batch []veil.PushFrame) {
	if len(batch) == 0 {
		return
	}
	drops := f.inv.Apply(batch)
	n := len(batch)
	f.mu.Lock()
	for why, k := range drops {
		f.dropped[why] += float64(k)
		n -= k
	}
	f.applied += float64(n)
	f.lastFrame = time.Now()
	f.mu.Unlock()
}

func (f *PushFeed) drop(why PushDrop, n int) {
	f.mu.Lock()
	f.dropped[why] += float64(n)
	f.mu.Unlock()
}

// PushStatus is what the feed is: its mode since when, and, while the socket is open, since
// when it has been connected.
type PushStatus struct {
	Mode  string    // PushModePush, PushModePolling or PushModeConnecting
	Since time.Time // when Mode began
	// ConnectedSince is when the open socket was opened; zero while none is open.
	ConnectedSince time.Time
	// LastConnect is when a socket was last opened; zero if never.
	LastConnect time.Time
	Frames      float64
	Dropped     float64
	LastFrame   time.Time
	LastError   string
}

// Status returns what the feed is now.
func (f *PushFeed) Status() PushStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var dropped float64
	for _, n := range f.dropped {
		dropped += n
	}
	st := PushStatus{Mode: f.mode, Since: f.since, LastConnect: f.lastConnect, Frames: f.applied, Dropped: dropped, LastFrame: f.lastFrame, LastError: f.lastErr}
	if f.mode == PushModePush {
		st.ConnectedSince = f.lastConnect
	}
	return st
}

// RunStatus reports the feed as the collector "push", a run being the socket's life: while it
// is open the run succeeds, its duration is how long it has been open and its last success is
// when it opened (zero while none is open, so that VeilCollectorFailing leaves a lost socket to
// veil_push_mode); a controller without the channel is not a failure (unavailable).
func (f *PushFeed) RunStatus() []runstatus.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := runstatus.Status{Collector: "push", Success: f.mode == PushModePush, Unavailable: f.mode == PushModePolling, Error: f.lastErr}
	if f.mode == PushModePush {
		st.LastSuccess, st.Duration = f.lastConnect, time.Since(f.lastConnect)
	}
	return []runstatus.Status{st}
}

// Describe implements prometheus.Collector.
func (f *PushFeed) Describe(ch chan<- *prometheus.Desc) {
	d := f.descs
	for _, x := range []*prometheus.Desc{d.mode, d.applied, d.dropped, d.connects, d.lastFrame} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (f *PushFeed) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.descs
	for _, m := range []string{PushModePush, PushModePolling, PushModeConnecting} {
		v := 0.0
		if m == f.mode {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(d.mode, prometheus.GaugeValue, v, m)
	}
	ch <- prometheus.MustNewConstMetric(d.applied, prometheus.CounterValue, f.applied)
	for _, why := range []PushDrop{"not_json", "no_id", "unknown_event", DropUnknownResource, DropBadObject, DropTooLarge} {
		ch <- prometheus.MustNewConstMetric(d.dropped, prometheus.CounterValue, f.dropped[why], string(why))
	}
	ch <- prometheus.MustNewConstMetric(d.connects, prometheus.CounterValue, f.connects)
	last := 0.0
	if !f.lastFrame.IsZero() {
		last = metricutil.UnixSeconds(f.lastFrame)
	}
	ch <- prometheus.MustNewConstMetric(d.lastFrame, prometheus.GaugeValue, last)
}

// jittered is d give or take a fifth, so controllers' feeds do not reconnect in step.
func jittered(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d/5)*2+1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
