package forwarder

import (
	"bytes"
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
// The header map is sized once and its values share one backing array: this runs for every
// event of a catch-up.
func message(prefix, controller, controllerURL string, e *veil.Event) *nats.Msg {
	class := "none"
	subject := ""
	if len(e.Entities) > 0 {
		class, subject = e.Entities[0].Class, e.Entities[0].UUID
	}
	id := controller + "." + e.ID
	v := [...]string{id, "application/json", "1.0", id, controllerURL, prefix + "." + e.Type, createdText(e), subject}
	vals := v[:]
	h := make(nats.Header, len(v))
	for i, k := range [...]string{nats.MsgIdHdr, "Content-Type", "ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time", "ce-subject"} {
		if vals[i] != "" || k != "ce-subject" {
			h[k] = vals[i : i+1 : i+1]
		}
	}
	return &nats.Msg{
		Subject: prefix + "." + sanitizeToken(controller) + "." + sanitizeToken(e.Type) + "." + sanitizeToken(class),
		Header:  h,
		Data:    e.Raw,
	}
}

// eventSource is the controller URL without userinfo, for ce-source: a URL written as
// https://user:pass@host must not hand its credentials to every subscriber of the stream. The
// rest stays byte for byte as configured, and a URL that does not parse is cut the same way
// (config rejects those, but nothing here may echo a password).
func eventSource(controllerURL string) string {
	start := 0
	if i := strings.Index(controllerURL, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(controllerURL)
	if i := strings.IndexAny(controllerURL[start:], "/?#"); i >= 0 {
		end = start + i
	}
	if at := strings.LastIndexByte(controllerURL[start:end], '@'); at >= 0 {
		return controllerURL[:start] + controllerURL[start+at+1:]
	}
	return controllerURL
}

// createdText is created as the API gave it when it can be found in the raw body, so that
// precision survives; otherwise RFC 3339 with the parsed value.
func createdText(e *veil.Event) string {
	key := []byte(`"created":`)
	if i := bytes.Index(e.Raw, key); i >= 0 {
		rest := bytes.TrimLeft(e.Raw[i+len(key):], " ")
		if len(rest) > 1 && rest[0] == '"' {
			if j := bytes.IndexByte(rest[1:], '"'); j >= 0 {
				return string(rest[1 : 1+j])
			}
		}
	}
	return e.Created.UTC().Format(time.RFC3339Nano)
}

// publisher sends a batch in order without waiting; the returned wait reports how many leading
// messages are safely published, so that sending the next batch overlaps waiting for this one.
// sent is how many messages left for the server; err says why the others did not. Sending stops
// once the connection's reconnect count is no longer epoch: messages written to the old
// connection may be lost, and the rest must not overtake them.
type publisher interface {
	send(msgs []*nats.Msg, epoch uint64) (sent int, wait func(ctx context.Context) (int, error), err error)
}

// noRetry turns off the client's own retry of an asynchronous publish answered "no responders"
// (a cluster without a stream leader for a moment): it resends each message on its own timer, so
// a batch that met no leader reached the stream in a random order (seen with three replicas on a
// three-node cluster). Failed, the batch is sent again in order from the position instead.
var noRetry = jetstream.WithRetryAttempts(0)

// jsPublisher publishes asynchronously to JetStream; an event counts only once it and all before
// it are acknowledged.
type jsPublisher struct {
	js      jetstream.JetStream
	timeout time.Duration
}

func (p *jsPublisher) send(msgs []*nats.Msg, epoch uint64) (int, func(context.Context) (int, error), error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var sendErr error
	nc := p.js.Conn()
	for _, m := range msgs {
		if reconnects(nc) != epoch {
			sendErr = errReconnected
			break
		}
		// The message carries Nats-Msg-Id already (message): jetstream.WithMsgID would only
		// look it up and set it again, an option closure and a header write per event.
		f, err := p.js.PublishMsgAsync(m, noRetry)
		if err != nil {
			sendErr = fmt.Errorf("couldn't publish: %w", err)
			break
		}
		futures = append(futures, f)
	}
	return len(futures), func(ctx context.Context) (int, error) {
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
	}, sendErr
}

// corePublisher is at-most-once: a flush after the batch is all the confirmation core NATS gives.
type corePublisher struct {
	nc      *nats.Conn
	timeout time.Duration
}

func (p *corePublisher) send(msgs []*nats.Msg, epoch uint64) (int, func(context.Context) (int, error), error) {
	failed := func(i int, err error) (int, func(context.Context) (int, error), error) {
		return i, func(context.Context) (int, error) { return i, err }, err
	}
	if !p.nc.IsConnected() {
		return failed(0, nats.ErrDisconnected)
	}
	for i, m := range msgs {
		if reconnects(p.nc) != epoch {
			return failed(i, errReconnected)
		}
		if err := p.nc.PublishMsg(m); err != nil {
			return failed(i, fmt.Errorf("couldn't publish: %w", err))
		}
	}
	return len(msgs), func(ctx context.Context) (int, error) {
		fctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		if err := p.nc.FlushWithContext(fctx); err != nil {
			// At most once: the messages left, so they count as published even unconfirmed.
			return len(msgs), fmt.Errorf("couldn't confirm publishing (core NATS, at most once): %w", err)
		}
		return len(msgs), nil
	}, nil
}
