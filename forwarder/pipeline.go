package forwarder

// The publisher's pipeline: batches published in order from a goroutine of its own while the
// reader goes on, the position moved past what the stream acknowledged (acknowledged) and stored
// while the next batch goes out (saver).

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

const (
	// maxBatchEvents caps a batch, whatever max_pending allows: the server's default limit of
	// an atomic batch, and memory stays bounded.
	maxBatchEvents = 1000
	// saveEvery bounds how many acknowledged events may wait for the next position write while
	// a cycle publishes (besides the batch that goes out while it is written); the position is
	// always written when the cycle's publishing ends.
	saveEvery = 1000
	// A position that could not be stored is retried with this backoff before more than the
	// batch out meanwhile is acknowledged: publishing on while the store fails only widens what
	// a restart sends again.
	saveRetryMin = 100 * time.Millisecond
	saveRetryMax = 5 * time.Second
)

// pipeline publishes batches in order from a goroutine of its own, so that reading the journal
// goes on while a batch is out: each batch is stored right after the controller's newest message
// on the stream (the expectation the stream leader enforces, publisher), and the position advances
// (and is stored every saveEvery events, while the next batch goes out) past what the stream
// acknowledged. A publisher with nothing to do takes what the reader holds rather than wait for a
// full batch (takesEarly).
type pipeline struct {
	fw     *Forwarder
	size   int // events per batch
	queue  chan sentBatch
	failed chan struct{} // closed once the publisher stopped on err
	done   chan struct{}
	err    error       // written by the publisher before closing failed
	acked  int         // read after done
	idle   atomic.Bool // the publisher waits for a batch

	// sendErr, once set, stops sending.
	sendErr error
	// serial is how many events are still to be sent one at a time after a failure, so that the
	// position stops exactly at the first event the stream refuses (a full stream, say), not at
	// the start of its batch; then batches of fullSize resume.
	serial   int
	fullSize int
	// firstExpect is the controller's newest stream sequence before the first batch (begun once
	// it went out): every event the read took ahead of its time follows it (markInstants).
	firstExpect uint64
	begun       bool
}

// serialEvents is how many events are published one at a time after a failure.
const serialEvents = 100

type sentBatch struct {
	events []veil.Event
	msgs   []*nats.Msg
	// future says, for each event, that it was published ahead of its time (position.Future).
	future []bool
	// expect is the controller's newest stream sequence before the batch (the publisher sets
	// it): the sequence its messages follow.
	expect uint64
}

// startPipeline sizes batches from max_pending (what may be unacknowledged at once: one batch),
// at most maxBatchEvents, the server's limit on an atomic batch.
func (fw *Forwarder) startPipeline(ctx context.Context) *pipeline {
	stream := fw.out.stream
	pending := stream.cfg.JetStream.MaxPending
	if stream.js == nil || pending < 1 {
		pending = maxBatchEvents
	}
	size := max(1, min(pending, maxBatchEvents))
	fw.mu.Lock()
	serial := fw.out.serialLeft
	fw.mu.Unlock()
	if stream.js == nil {
		serial = 0
	}
	p := &pipeline{fw: fw, size: size, fullSize: size, queue: make(chan sentBatch, 2),
		failed: make(chan struct{}), done: make(chan struct{}), serial: serial}
	if serial > 0 {
		p.size = 1
	}
	go p.publish(ctx)
	return p
}

// send queues a batch for publishing; it blocks while the queue is full. Nothing more is sent
// once the publisher failed: the next cycle starts again from the acknowledged position.
func (p *pipeline) send(b sentBatch) error {
	if p.sendErr != nil {
		return p.sendErr
	}
	fw := p.fw
	if fence := fw.opts.Fence; fence != nil && !fence() {
		p.sendErr = errFenced
		return p.sendErr
	}
	if p.serial > 0 {
		if p.serial -= len(b.events); p.serial <= 0 {
			p.serial, p.size = 0, p.fullSize
		}
	}
	select {
	case p.queue <- b:
		return nil
	case <-p.failed:
		p.sendErr = p.err
		return p.err
	}
}

// close waits until every batch queued is published (or the publisher failed) and returns how
// many events were published, and the failure if any.
func (p *pipeline) close() (int, error) {
	close(p.queue)
	<-p.done
	return p.acked, p.err
}

func (p *pipeline) publish(ctx context.Context) {
	defer close(p.done)
	fw := p.fw
	unsaved := 0
	var pos position
	sv := saver{fw: fw}
	for {
		b, ok := p.next()
		if !ok {
			break
		}
		if p.err != nil {
			continue // drain: after a failure nothing more is published
		}
		if err := sv.failed(); err != nil {
			p.stop(err) // another instance moved the position, or the lease ended
			continue
		}
		fw.mu.Lock()
		b.expect = fw.out.seq
		if !p.begun {
			p.begun, p.firstExpect = true, b.expect
		}
		fw.out.markInstants(b, p.firstExpect)
		fw.mu.Unlock()
		n, last, err := fw.out.pub.publish(ctx, b.msgs, b.expect)
		if n > 0 {
			pos = fw.acknowledged(b, n, last)
			p.acked += n
			unsaved += n
		}
		if err != nil && ctx.Err() == nil {
			// Any failure leaves the stream's state uncertain (a timeout may have stored the
			// batch): the next cycle reads the position from the stream first.
			fw.mu.Lock()
			fw.out.needSync = true
			fw.mu.Unlock()
			fw.obs.publishFailed(err)
		}
		// The position is written every saveEvery events and once the sender is done (below):
		// not after each batch, which during a catch-up meant a write (two fsyncs) per batch for
		// nothing a restart needs now that the stream says where we are. It is written while
		// the next batch goes out (saver), except after a failure: then at once.
		if unsaved > 0 && (err != nil || unsaved >= saveEvery) {
			unsaved = 0
			serr := sv.wait()
			switch {
			case serr != nil:
			case err != nil:
				serr = fw.savePosition(ctx, pos)
			default:
				sv.start(ctx, pos)
			}
			if serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			p.stop(err)
		}
	}
	serr := sv.wait()
	if unsaved > 0 && serr == nil {
		serr = fw.savePosition(ctx, pos)
	}
	if serr != nil && p.err == nil {
		p.err = serr
	}
}

// next waits for the next batch; ok is false once the sender is done. While it waits the sender
// sees it idle (takesEarly).
func (p *pipeline) next() (b sentBatch, ok bool) {
	select {
	case b, ok = <-p.queue:
		return b, ok
	default:
	}
	p.idle.Store(true)
	b, ok = <-p.queue
	p.idle.Store(false)
	return b, ok
}

// takesEarly says whether the reader sends the batch it holds (held events) before it is full,
// left rows of the list still to read: when the publisher has nothing to do and the batch is half
// full (each batch costs the server a staging store of its own, so not every page), or holds half
// a page and the rest of the list fits in one batch, so that the end of a catch-up waits for the
// last page's events, not for a batch held back until then. A poll's few events wait for the end
// of its read, one batch per poll as before the rule: what an early batch bought a poll was
// nothing, and it was the one change to forwarding between a make bench-fleet run whose rolling
// restart held and runs that did not (which runs of the same code also vary between).
func (p *pipeline) takesEarly(held, left int) bool {
	return held > 0 && p.idle.Load() && (2*held >= p.size || left < p.size && 2*held >= p.fw.reader.page)
}

// stop ends publishing on err: what is queued after it is drained, not published.
func (p *pipeline) stop(err error) {
	p.err = err
	close(p.failed)
}

// saver writes positions from a goroutine of its own, so that the next batch goes out while the
// position of the one before is stored (two fsyncs with the file store, a round trip with the
// bucket: during a catch-up about a tenth of the publisher's time per batch). One save at a time,
// in order: the publisher waits for a save before it starts the next, so a store that fails
// stops publishing one batch later at most, and a save that was refused (another instance owns
// the position, the lease ended) stops it at the next batch, or the one after when the refusal
// comes while that one goes out. What the stream holds stays guarded by the expectation either
// way: the position is only the fallback of a restart.
type saver struct {
	fw   *Forwarder
	done chan error // the save in flight; nil when none
}

func (s *saver) start(ctx context.Context, pos position) {
	done := make(chan error, 1)
	s.done = done
	go func() { done <- s.fw.savePosition(ctx, pos) }()
}

// wait returns what the save in flight returned (nil when none).
func (s *saver) wait() error {
	if s.done == nil {
		return nil
	}
	err := <-s.done
	s.done = nil
	return err
}

// failed returns the error of a save that ended with one, without waiting for one in flight.
func (s *saver) failed() error {
	select {
	case err := <-s.done: // a nil channel: none in flight
		s.done = nil
		return err
	default:
		return nil
	}
}

// acknowledged advances the position past the first n events of b, which the stream
// acknowledged together with all events before them, the last with stream sequence seq (0: core
// NATS), and returns it.
func (fw *Forwarder) acknowledged(b sentBatch, n int, seq uint64) position {
	events, msgs, future := b.events[:n], b.msgs[:n], b.future[:n]
	fw.mu.Lock()
	defer fw.mu.Unlock()
	out := &fw.out
	if seq > 0 {
		out.seq = seq
	}
	p := fw.pos.clone()
	p.FromStart = false
	republished := 0
	var newest futureEvent // the newest event of the batch published ahead of the clock
	for i, e := range events {
		if future[i] {
			p.addFuture(e.Created.Time, e.ID, b.expect)
			if e.Created.After(newest.Created) {
				newest = futureEvent{ID: e.ID, Created: e.Created.Time}
			}
		} else {
			p.advance(e.Created.Time, e.ID)
		}
		if e.Invalid != "" {
			p.addOdd(e.ID)
		}
		if out.republishUntil.published(e.Created.Time, e.ID) {
			republished++
		}
		if !e.Created.After(p.TailCreated) && p.Ahead > 0 {
			p.Ahead--
		}
	}
	fw.obs.acked(events, msgs, republished)
	if out.republishUntil.Known && p.Created.After(out.republishUntil.Created) {
		out.republishUntil = position{} // past what the rewind went back from
	}
	fw.pos = p
	if newest.ID != "" {
		fw.obs.aheadFrom(newest, fw.clock()) // says so if it is ahead of the clock by much
	}
	return p.clone()
}

// typeLabel bounds the type label of veil_events_published_total to the platform's three types:
// the raw type is free text from the API (the subject still carries it, sanitized).
func typeLabel(t string) string {
	switch t {
	case "info", "warning", "error":
		return t
	}
	return "other"
}

// savePosition stores an acknowledged position, retrying any failure but a conflict (another
// instance owns the position, returned) until it is stored or ctx is done. It does not return
// before: a journal gone quiet brings no later save, and a stale stored position would publish
// again, after a restart, events the duplicate window may no longer catch. Each failure is
// counted in veil_events_publish_errors_total and shown in Status.LastError.
func (fw *Forwarder) savePosition(ctx context.Context, p position) error {
	delay := saveRetryMin
	for {
		// Acknowledged events are published: store that even when ctx was just cancelled.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := fw.cp.Save(sctx, p)
		cancel()
		if err == nil || errors.Is(err, errCheckpointConflict) || errors.Is(err, errFenced) {
			return err
		}
		fw.obs.saveFailed(err)
		if !sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, saveRetryMax)
	}
}
