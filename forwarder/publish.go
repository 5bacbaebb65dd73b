package forwarder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/veil"
)

// sanitizeToken makes s one NATS subject token (DESIGN.md §6).
func sanitizeToken(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, s)
}

// message builds the NATS message of one event: subject, CloudEvents binary headers, raw body.
func message(prefix, controller, controllerURL string, e *veil.Event) *nats.Msg {
	class := "none"
	if len(e.Entities) > 0 {
		class = e.Entities[0].Class
	}
	m := nats.NewMsg(prefix + "." + sanitizeToken(controller) + "." + sanitizeToken(e.Type) + "." + sanitizeToken(class))
	id := controller + "." + e.ID
	m.Header.Set(nats.MsgIdHdr, id)
	m.Header.Set("Content-Type", "application/json")
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-id", id)
	m.Header.Set("ce-source", controllerURL)
	m.Header.Set("ce-type", prefix+"."+e.Type)
	m.Header.Set("ce-time", createdText(e))
	if len(e.Entities) > 0 && e.Entities[0].UUID != "" {
		m.Header.Set("ce-subject", e.Entities[0].UUID)
	}
	m.Data = e.Raw
	return m
}

// createdText is created as the API gave it when it can be found in the raw body, so that
// precision survives; otherwise RFC 3339 with the parsed value.
func createdText(e *veil.Event) string {
	const key = `"created":`
	if i := strings.Index(string(e.Raw), key); i >= 0 {
		rest := strings.TrimLeft(string(e.Raw[i+len(key):]), " ")
		if len(rest) > 1 && rest[0] == '"' {
			if j := strings.IndexByte(rest[1:], '"'); j >= 0 {
				return rest[1 : 1+j]
			}
		}
	}
	return e.Created.UTC().Format(time.RFC3339Nano)
}

// publisher sends a batch in order without waiting; the returned wait reports how many leading
// messages are safely published, so that sending the next batch overlaps waiting for this one.
type publisher interface {
	send(msgs []*nats.Msg) (wait func(ctx context.Context) (int, error))
}

// jsPublisher publishes asynchronously to JetStream; an event counts only once it and all before
// it are acknowledged.
type jsPublisher struct {
	js      jetstream.JetStream
	timeout time.Duration
}

func (p *jsPublisher) send(msgs []*nats.Msg) func(context.Context) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var sendErr error
	for _, m := range msgs {
		f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(m.Header.Get(nats.MsgIdHdr)))
		if err != nil {
			sendErr = fmt.Errorf("couldn't publish: %w", err)
			break
		}
		futures = append(futures, f)
	}
	return func(ctx context.Context) (int, error) {
		// The client times futures out by itself (publish_timeout); this timer only guards
		// against a future that never resolves.
		timer := time.NewTimer(p.timeout)
		defer timer.Stop()
		for i, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return i, fmt.Errorf("publish not acknowledged: %w", err)
			case <-timer.C:
				return i, errors.New("publish not acknowledged within publish_timeout")
			case <-ctx.Done():
				return i, ctx.Err()
			}
		}
		return len(futures), sendErr
	}
}

// corePublisher is at-most-once: a flush after the batch is all the confirmation core NATS gives.
type corePublisher struct {
	nc      *nats.Conn
	timeout time.Duration
}

func (p *corePublisher) send(msgs []*nats.Msg) func(context.Context) (int, error) {
	if !p.nc.IsConnected() {
		return func(context.Context) (int, error) { return 0, nats.ErrDisconnected }
	}
	for i, m := range msgs {
		if err := p.nc.PublishMsg(m); err != nil {
			return func(context.Context) (int, error) { return i, fmt.Errorf("couldn't publish: %w", err) }
		}
	}
	return func(ctx context.Context) (int, error) {
		fctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		if err := p.nc.FlushWithContext(fctx); err != nil {
			// At most once: the messages left, so they count as published even unconfirmed.
			return len(msgs), fmt.Errorf("couldn't confirm publishing (core NATS, at most once): %w", err)
		}
		return len(msgs), nil
	}
}
