// The controller's push channel (GET /ws/?token=<token>): a WebSocket on which a client
// subscribes to resources and receives a frame for every object of them that changes.

package veil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/coder/websocket"
)

// Push events of a data frame.
const (
	PushCreated = "CREATED"
	PushUpdated = "UPDATED"
	PushDeleted = "DELETED"
)

// ErrNoPush is the error of DialPush on a controller without the push channel: it refused the
// upgrade (404, 400, 405 and the like), so the collections must be polled.
var ErrNoPush = errors.New("veil: the controller has no push channel (/ws/)")

// PushFrame is one data frame: Object is the resource as its collection lists it.
type PushFrame struct {
	Resource string          `json:"resource"` // "/domains/", "/nodes/", ...
	Event    string          `json:"event"`    // PushCreated, PushUpdated, PushDeleted
	ID       string          `json:"id"`
	Object   json.RawMessage `json:"object"`
}

// MaxPushFrame bounds one frame read from the push channel; a longer one fails the socket with
// an error wrapping ErrPushFrameTooBig (the websocket library closes it).
const MaxPushFrame = 4 << 20

// ErrPushFrameTooBig: a frame over MaxPushFrame ended the socket.
var ErrPushFrameTooBig = errors.New("veil: push frame over 4 MiB")

// Push is one open push channel; Next reads it from one goroutine.
type Push struct {
	conn *websocket.Conn
	tok  string   // the token it was opened with, kept out of its errors
	c    *Client  // told about the frames dropped (Client.Reject)
	subs []string // the resources subscribed to: the only ones a Rejection names
}

// pushErr is err without the token it was dialled with: the websocket library's errors can
// carry the URL (net/url.Error), whose query holds it, and a server's close reason is its text.
// Only the cause of a url.Error is kept, and the token is replaced raw and query-escaped.
func pushErr(err error, tok string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(tok) >= 4 {
		s = strings.ReplaceAll(s, url.QueryEscape(tok), "[REDACTED]")
		s = strings.ReplaceAll(s, tok, "[REDACTED]")
	}
	return s
}

// DialPush opens the push channel and subscribes to resources ("/domains/", "/nodes/", ...).
// A controller that refuses the upgrade gives an error wrapping ErrNoPush (401 and 403:
// ErrUnauthorized, a proxy in front that checks the token); the token is sent without its
// "jwt " prefix, in the query as the platform wants, and never appears in errors.
func (c *Client) DialPush(ctx context.Context, resources []string) (*Push, error) {
	tok := c.currentToken()
	u := c.base + "/ws/?token=" + url.QueryEscape(tok)
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	default:
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: http.Header{"User-Agent": []string{c.userAgent}},
	})
	if err != nil {
		switch {
		case resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
			return nil, fmt.Errorf("veil: push channel: the upgrade was answered %d: %w", resp.StatusCode, ErrUnauthorized)
		case resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode < 500:
			return nil, fmt.Errorf("%w: the upgrade was answered %d", ErrNoPush, resp.StatusCode)
		}
		return nil, fmt.Errorf("veil: push channel: %s", pushErr(err, tok))
	}
	conn.SetReadLimit(MaxPushFrame)
	for _, r := range resources {
		if err := conn.Write(dctx, websocket.MessageText, []byte("add "+r)); err != nil {
			conn.CloseNow()
			return nil, fmt.Errorf("veil: push channel: subscribing to %s: %s", r, pushErr(err, tok))
		}
	}
	return &Push{conn: conn, tok: tok, c: c, subs: slices.Clone(resources)}, nil
}

// PushBadFrameError is a frame Next could not use: not JSON, or a data frame without a
// resource, an event or an id. The socket stays usable. Next has told the client's Rejected
// about it (collection "push", or the resource's collection when the frame names one).
type PushBadFrameError struct {
	Reason string // not_json, no_id, unknown_event
}

func (e *PushBadFrameError) Error() string { return "veil: push frame dropped: " + e.Reason }

// Next returns the next data frame. Control and text frames are skipped; a frame saying the
// token was refused gives an error wrapping ErrUnauthorized; a frame that cannot be used gives
// a *PushBadFrameError (read on); any other error ends the socket.
func (p *Push) Next(ctx context.Context) (PushFrame, error) {
	for {
		_, b, err := p.conn.Read(ctx)
		if errors.Is(err, websocket.ErrMessageTooBig) {
			return PushFrame{}, ErrPushFrameTooBig
		}
		if err != nil {
			if ctx.Err() != nil {
				return PushFrame{}, ctx.Err()
			}
			return PushFrame{}, fmt.Errorf("veil: push channel: %s", pushErr(err, p.tok))
		}
		var f struct {
			MsgType string `json:"msg_type"`
			Text    string `json:"text"`
			PushFrame
		}
		if err := json.Unmarshal(b, &f); err != nil {
			if strings.Contains(string(b), "token error") {
				return PushFrame{}, fmt.Errorf("veil: push channel: token refused: %w", ErrUnauthorized)
			}
			p.c.Reject(Rejection{Collection: "push", Reason: RejectDecode, Err: fmt.Errorf("frame of %d bytes is not a JSON object: %w", len(b), err)})
			return PushFrame{}, &PushBadFrameError{Reason: "not_json"}
		}
		coll := "push" // a resource from the frame names a collection only if subscribed to
		if slices.Contains(p.subs, f.Resource) {
			coll = CollectionOf(f.Resource)
		}
		switch {
		case strings.Contains(f.Text, "token error"):
			return PushFrame{}, fmt.Errorf("veil: push channel: token refused: %w", ErrUnauthorized)
		case f.MsgType != "data":
			continue
		case f.Event != PushCreated && f.Event != PushUpdated && f.Event != PushDeleted:
			p.c.Reject(Rejection{Collection: coll, ID: capID(f.ID), Field: "event", Reason: RejectDecode, Err: fmt.Errorf("unknown event %q", capID(f.Event))})
			return PushFrame{}, &PushBadFrameError{Reason: "unknown_event"}
		case f.ID == "" || f.Resource == "":
			p.c.Reject(Rejection{Collection: coll, ID: capID(f.ID), Field: "id", Reason: RejectMissingID, Err: errors.New("data frame without an id or a resource")})
			return PushFrame{}, &PushBadFrameError{Reason: "no_id"}
		}
		return f.PushFrame, nil
	}
}

// Ping sends a ping and waits for its pong; a socket that stays silent fails it.
func (p *Push) Ping(ctx context.Context) error {
	if err := p.conn.Ping(ctx); err != nil {
		return fmt.Errorf("veil: push channel: ping: %s", pushErr(err, p.tok))
	}
	return nil
}

// Close closes the socket.
func (p *Push) Close() error { return p.conn.Close(websocket.StatusNormalClosure, "") }

// DecodeObject decodes one object as its collection lists it (a push frame's Object), with the
// rules of the list reads.
func DecodeObject[T any](raw []byte) (T, error) {
	var v T
	err := decodeValue(raw, &v)
	return v, err
}

// Raw is an object of a collection with the bytes the API returned for it, for those who keep
// the object as the controller lists it (the inventory on NATS).
type Raw[T any] struct {
	Value T
	JSON  json.RawMessage
}

// UnmarshalJSON keeps a copy of b and decodes it as the list reads do.
func (r *Raw[T]) UnmarshalJSON(b []byte) error {
	r.JSON = append(json.RawMessage(nil), b...)
	return decodeValue(b, &r.Value)
}

func (r Raw[T]) objectID() string {
	if id, ok := any(r.Value).(identified); ok {
		return id.objectID()
	}
	return ""
}

// ListAllRaw reads a whole collection (as Nodes, Domains... do) keeping each object's bytes.
func ListAllRaw[T any](ctx context.Context, c *Client, path string) ([]Raw[T], error) {
	return listAll[Raw[T]](ctx, c, path, nil)
}
