package forwarder

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

const (
	// maxBatchEvents caps a batch, whatever max_pending allows, so memory stays bounded.
	maxBatchEvents = 1000
	// saveEvery bounds how many acknowledged events may wait for the next position write while
	// a cycle publishes; the position is always written when the cycle's publishing ends.
	saveEvery = 1000
	// A position that could not be stored is retried with this backoff before anything more is
	// acknowledged: publishing on while the store fails only widens what a restart sends again.
	saveRetryMin = 100 * time.Millisecond
	saveRetryMax = 5 * time.Second
)

// errReconnected stops a pipeline whose connection was replaced while batches were unresolved:
// their tail may be lost, and sending more would store later events before those are retried.
var errReconnected = errors.New("NATS reconnected while publishes were unacknowledged; resending from the acknowledged position")

// pipeline publishes batches without waiting for each one's acknowledgement: an acknowledger
// goroutine awaits the batches in order and advances (and stores) the position past every event
// acknowledged together with all events before it. At most max_pending events are unacknowledged.
type pipeline struct {
	fw   *Forwarder
	size int // events per batch
	// atMostOnce (core NATS): what left for the server counts as published, confirmed or not,
	// also after a failure, so that nothing is sent twice.
	atMostOnce bool
	nc         *nats.Conn
	queue      chan sentBatch
	failed     chan struct{} // closed once the acknowledger stopped on err
	done       chan struct{}
	err        error // written by the acknowledger before closing failed
	// lateErr is a conflict met while draining at most once; read after done.
	lateErr error
	acked   int // read after done

	// Sender side: sendErr, once set, stops sending; epoch is the reconnect count every batch
	// not yet resolved was sent under; sent counts batches sent, resolved those the
	// acknowledger saw fully acknowledged.
	sendErr  error
	epoch    uint64
	sent     int64
	resolved atomic.Int64

	// serial is how many events are still to be sent one at a time, each only once the one
	// before was acknowledged; then batches of fullSize are pipelined again. Pipelined, a
	// failure in the middle of a flight may be followed by later messages of that flight being
	// stored ahead of the one that failed and is sent again (seen: a stream full for a while,
	// then not; a new connection whose server had not yet learnt of the stream: "no
	// responders" for the first messages only). One at a time, what follows keeps its place.
	serial   int
	waitNext bool // the last batch was sent one at a time: the next waits for it
	fullSize int
	step     chan struct{} // a batch resolved
	ctx      context.Context
}

// serialEvents is how many events are published one at a time after a failure; after a new
// connection, the first one is.
const serialEvents = 100

type sentBatch struct {
	events []veil.Event
	msgs   []*nats.Msg
	sent   int
	wait   func(context.Context) (int, error)
}

// startPipeline sizes batches and the queue from max_pending: one batch awaited, depth queued and
// one being sent are in flight together, never more than the client's own pending limit (beyond
// which it would stall the sender).
func (fw *Forwarder) startPipeline(ctx context.Context) *pipeline {
	pending := fw.opts.NATS.JetStream.MaxPending
	if fw.opts.Conn.js == nil || pending < 1 {
		pending = maxBatchEvents
	}
	size := max(1, min(pending/4, maxBatchEvents))
	depth := min(max(0, pending/size-2), 8)
	fw.mu.Lock()
	if e := reconnects(fw.opts.Conn.nc); !fw.epochSeen || e != fw.epoch {
		fw.epochSeen, fw.epoch = true, e
		fw.serialLeft = max(fw.serialLeft, 1) // the first message proves the stream reachable
	}
	serial := 0
	if fw.opts.Conn.js != nil {
		serial = fw.serialLeft
	}
	fw.mu.Unlock()
	p := &pipeline{fw: fw, size: size, fullSize: size, atMostOnce: fw.opts.Conn.js == nil, nc: fw.opts.Conn.nc,
		queue: make(chan sentBatch, depth), failed: make(chan struct{}), done: make(chan struct{}),
		serial: serial, step: make(chan struct{}, 1), ctx: ctx}
	if serial > 0 {
		p.size = 1
	}
	p.epoch = reconnects(p.nc)
	go p.acknowledge(ctx)
	return p
}

// send publishes a batch and queues it for acknowledgement; it blocks while the queue is full.
// Nothing more is sent once a batch could not be sent whole, the acknowledger has failed, or the
// connection was replaced while earlier batches were unresolved: each of these may leave events
// unsent that must go out before later ones. A batch that was sent is always queued (the
// acknowledger drains the queue after a failure), so that what left at most once is accounted
// in order.
func (p *pipeline) send(batch []veil.Event) error {
	if p.sendErr != nil {
		return p.sendErr
	}
	select {
	case <-p.failed:
		return p.err
	default:
	}
	if r := reconnects(p.nc); r != p.epoch {
		if p.resolved.Load() != p.sent {
			p.sendErr = errReconnected
			return p.sendErr
		}
		p.epoch = r // nothing in flight: the new connection is a clean start
	}
	for p.waitNext && p.resolved.Load() != p.sent {
		select {
		case <-p.step:
		case <-p.failed:
			return p.err
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
	}
	fw := p.fw
	if fw.opts.Fence != nil && !fw.opts.Fence() {
		p.sendErr = errFenced
		return p.sendErr
	}
	msgs := make([]*nats.Msg, len(batch))
	for i := range batch {
		msgs[i] = message(fw.opts.NATS.SubjectPrefix, fw.opts.Controller, fw.source, &batch[i])
	}
	b := sentBatch{events: batch, msgs: msgs}
	var err error
	b.sent, b.wait, err = fw.pub.send(msgs, p.epoch)
	p.sent++
	p.waitNext = p.serial > 0
	if p.serial > 0 {
		if p.serial -= len(batch); p.serial <= 0 {
			p.serial, p.size = 0, p.fullSize
		}
	}
	p.queue <- b
	if err != nil {
		p.sendErr = err
		return err
	}
	return nil
}

// reconnects is how many times nc connected again; a change means a new connection, and what
// was written to the old one may be lost.
func reconnects(nc *nats.Conn) uint64 {
	if nc == nil {
		return 0
	}
	return nc.Stats().Reconnects
}

// close waits until every batch sent is acknowledged (or the acknowledger failed) and returns how
// many events were published, and the failure if any.
func (p *pipeline) close() (int, error) {
	close(p.queue)
	<-p.done
	if p.lateErr != nil {
		return p.acked, p.lateErr
	}
	return p.acked, p.err
}

func (p *pipeline) acknowledge(ctx context.Context) {
	defer close(p.done)
	fw := p.fw
	unsaved := 0
	var pos position
	for b := range p.queue {
		if p.err != nil {
			// Drain: after a failure nothing more advances, except what already left at most once.
			if p.atMostOnce && b.sent > 0 {
				pos = fw.acknowledged(b.events[:b.sent], b.msgs[:b.sent])
				p.acked += b.sent
				if err := fw.savePosition(ctx, pos); err != nil {
					p.lateErr = err
				}
			}
			continue
		}
		n, err := b.wait(ctx)
		if err == nil {
			p.resolved.Add(1)
			select {
			case p.step <- struct{}{}:
			default:
			}
		}
		if n > 0 {
			pos = fw.acknowledged(b.events[:n], b.msgs[:n])
			p.acked += n
			unsaved += n
		}
		if err != nil && ctx.Err() == nil {
			fw.mu.Lock()
			fw.pubErrors++
			fw.mu.Unlock()
		}
		// The position is written every saveEvery events and once the sender is done (below):
		// not after each batch, which during a catch-up waiting on the journal meant a write
		// (two fsyncs) per batch for nothing a restart needs.
		if unsaved > 0 && (err != nil || unsaved >= saveEvery) {
			unsaved = 0
			if serr := fw.savePosition(ctx, pos); serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			p.err = err
			close(p.failed)
		}
	}
	if unsaved > 0 {
		if err := fw.savePosition(ctx, pos); err != nil {
			p.err = err
		}
	}
}

// acknowledged advances the position past events that were acknowledged together with all
// events before them, and returns it.
func (fw *Forwarder) acknowledged(events []veil.Event, msgs []*nats.Msg) position {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	p := fw.pos.clone()
	for i, e := range events {
		p.advance(e.Created.Time, e.ID)
		fw.published[pubKey{typeLabel(e.Type), fw.classLabel(&e)}]++
		if !e.Created.After(p.TailCreated) && p.Ahead > 0 {
			p.Ahead--
		}
		if i >= len(events)-recentLen {
			fw.recent[fw.recentN%recentLen] = RecentEvent{ID: e.ID, Type: e.Type, Subject: msgs[i].Subject, Created: e.Created.Time}
			fw.recentN++
		}
	}
	fw.pos = p
	fw.lastAcked = time.Now()
	fw.backlog = max(0, fw.backlog-len(events))
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

// classLabel is the entity_class label of e: its first entity's class sanitized like the subject
// token, none without an entity, other past maxEntityClasses distinct values. fw.mu is held.
func (fw *Forwarder) classLabel(e *veil.Event) string {
	if len(e.Entities) == 0 {
		return "none"
	}
	c := sanitizeToken(e.Entities[0].Class)
	if fw.classes[c] {
		return c
	}
	if len(fw.classes) >= maxEntityClasses {
		return "other"
	}
	fw.classes[c] = true
	return c
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
		fw.mu.Lock()
		fw.pubErrors++
		fw.mu.Unlock()
		fw.fail(fmt.Errorf("position not stored, publishing paused until it is: %w", err))
		if !sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, saveRetryMax)
	}
}
