package forwarder

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

const (
	// maxBatchEvents caps a batch, whatever max_pending allows, so memory stays bounded.
	maxBatchEvents = 1000
	// saveEvery bounds how many acknowledged events may wait for the next position write while
	// later batches are still pending; the position is always written once nothing is pending.
	saveEvery = 1000
)

// pipeline publishes batches without waiting for each one's acknowledgement: an acknowledger
// goroutine awaits the batches in order and advances (and stores) the position past every event
// acknowledged together with all events before it. At most max_pending events are unacknowledged.
type pipeline struct {
	fw   *Forwarder
	size int // events per batch
	// atMostOnce (core NATS): what left for the server counts as published, confirmed or not,
	// also after a failure, so that nothing is sent twice.
	atMostOnce bool
	queue      chan sentBatch
	failed     chan struct{} // closed once the acknowledger stopped on err
	done       chan struct{}
	err        error // written by the acknowledger before closing failed
	// lateErr is a conflict met while draining at most once; read after done.
	lateErr error
	acked   int // read after done
}

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
	p := &pipeline{fw: fw, size: size, atMostOnce: fw.opts.Conn.js == nil, queue: make(chan sentBatch, depth),
		failed: make(chan struct{}), done: make(chan struct{})}
	go p.acknowledge(ctx)
	return p
}

// send publishes a batch and queues it for acknowledgement; it blocks while the queue is full
// and fails once the acknowledger has failed, so that nothing more is sent after a failure. A
// batch that was sent is always queued (the acknowledger drains the queue after a failure), so
// that what left at most once is accounted in order.
func (p *pipeline) send(batch []veil.Event) error {
	select {
	case <-p.failed:
		return p.err
	default:
	}
	fw := p.fw
	msgs := make([]*nats.Msg, len(batch))
	for i := range batch {
		msgs[i] = message(fw.opts.NATS.SubjectPrefix, fw.opts.Controller, fw.opts.ControllerURL, &batch[i])
	}
	b := sentBatch{events: batch, msgs: msgs}
	b.sent, b.wait = fw.pub.send(msgs)
	p.queue <- b
	return nil
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
	var pos Position
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
		if unsaved > 0 && (err != nil || len(p.queue) == 0 || unsaved >= saveEvery) {
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
}

// acknowledged advances the position past events that were acknowledged together with all
// events before them, and returns it.
func (fw *Forwarder) acknowledged(events []veil.Event, msgs []*nats.Msg) Position {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	p := fw.pos.clone()
	for i, e := range events {
		p.advance(e.Created.Time, e.ID)
		fw.published[e.Type]++
		if !e.Created.After(p.TailCreated) && p.Ahead > 0 {
			p.Ahead--
		}
		if i >= len(events)-recentLen {
			fw.recent[fw.recentN%recentLen] = RecentEvent{ID: e.ID, Type: e.Type, Subject: msgs[i].Subject, Created: e.Created.Time}
			fw.recentN++
		}
	}
	fw.pos = p
	fw.lastPub = time.Now()
	fw.backlog = max(0, fw.backlog-len(events))
	return p.clone()
}

// savePosition stores an acknowledged position. Only a conflict (another instance owns the
// position) is returned: any other failure is retried with the next save.
func (fw *Forwarder) savePosition(ctx context.Context, p Position) error {
	// Acknowledged events are published: store that even when ctx was just cancelled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err := fw.cp.Save(sctx, p)
	cancel()
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrCheckpointConflict) {
		return err
	}
	fw.fail(fmt.Errorf("couldn't store position: %w", err))
	return nil
}
