package veil

// Guest-agent commands: the raw POST /api/domains/{id}/guest-command/, typed calls for the
// read-only commands the exporter uses, and the typed errors a failed command returns.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"
)

// Errors a failed guest command (or AvailableGuestCommands) wraps, for errors.Is. A failure that
// is none of them (a 5xx, a refused token, an unknown domain, an undecodable answer) is an error
// of the controller, not of the guest.
var (
	// ErrGuestTimeout: the guest did not answer in time (the platform said so, answered 504, or
	// the request's deadline passed on the wire).
	ErrGuestTimeout = errors.New("guest agent timed out")
	// ErrAgentNotRunning: the guest agent, or the VM itself, is not running or not connected.
	ErrAgentNotRunning = errors.New("guest agent not running")
	// ErrGuestUnsupported: the platform refuses the command for this guest (an unknown or
	// disabled command, a Windows guest where it allows Linux only).
	ErrGuestUnsupported = errors.New("guest command not supported")
)

// guestMargin is how much longer than the guest's own timeout the HTTP request may take: the
// platform answers with its timeout error only after the guest's time is up.
const guestMargin = 2 * time.Second

// AvailableGuestCommands lists the commands the domain's guest agent offers.
func (c *Client) AvailableGuestCommands(ctx context.Context, id string) ([]string, error) {
	v, err := get[struct {
		Cmds []string `json:"qemu_available_cmds"`
	}](ctx, c, "/api/domains/{id}/available-guest-cmds/", id)
	if err != nil {
		return nil, guestError(err)
	}
	return v.Cmds, nil
}

// GuestCommand POSTs {"qemu_cmd","fargs","timeout"} and returns the raw value under the key
// named cmd; a command that is not read-only (readOnlyGuestCommand) is refused unsent. It is
// never retried: it carries no idempotency key, and the guest checker counts failures itself.
//
// timeout (rounded up to whole seconds) is sent to the platform when positive, and bounds the
// request on the wire (plus a margin for the platform's own timeout answer) from the moment it
// is sent: the wait for the client's request slots and rate limit is not part of it, and ends
// only with ctx. Without a timeout the client's Timeout applies on the wire.
func (c *Client) GuestCommand(ctx context.Context, id, cmd string, fargs any, timeout time.Duration) ([]byte, error) {
	raw, _, err := c.guestCommand(ctx, id, cmd, fargs, timeout)
	return raw, err
}

// readOnlyGuestCommand says whether the guest agent's command cmd only reads: guest-ping,
// guest-info, guest-network-get-interfaces and the guest-get-* family. Every other command
// (guest-exec, file, password, freeze, suspend, shutdown...) is refused before any request.
func readOnlyGuestCommand(cmd string) bool {
	switch cmd {
	case "guest-ping", "guest-info", "guest-network-get-interfaces":
		return true
	}
	return strings.HasPrefix(cmd, "guest-get-")
}

// exchange is the timing of one request on the wire, in the local clock.
type exchange struct {
	Sent     time.Time // the request was written
	Received time.Time // the first byte of the answer arrived
}

func (e exchange) roundTrip() time.Duration { return e.Received.Sub(e.Sent) }

// guestCommand is GuestCommand, also returning when the request went and its answer came.
func (c *Client) guestCommand(ctx context.Context, id, cmd string, fargs any, timeout time.Duration) ([]byte, exchange, error) {
	var ex exchange
	r, err := newRequest(http.MethodPost, "/api/domains/{id}/guest-command/", id)
	if err != nil {
		return nil, ex, err
	}
	if cmd == "" {
		return nil, ex, fmt.Errorf("veil: %s: empty command", r)
	}
	if !readOnlyGuestCommand(cmd) {
		return nil, ex, fmt.Errorf("veil: %s: %q is not a read-only guest command: the client only reads", r, cmd)
	}
	if fargs == nil {
		fargs = struct{}{}
	}
	body := map[string]any{"qemu_cmd": cmd, "fargs": fargs}
	if timeout > 0 {
		body["timeout"] = int(math.Ceil(timeout.Seconds()))
		r.timeout = timeout + min(guestMargin, timeout)
	}
	if r.body, err = json.Marshal(body); err != nil {
		return nil, ex, fmt.Errorf("veil: %s %s: encoding fargs: %w", r, cmd, err)
	}
	// The transport calls the hooks from its own goroutines. Only the last attempt counts (a
	// guest command is sent once, but a rotated token may make it go twice).
	var mu sync.Mutex
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			ex = exchange{Sent: time.Now()}
			mu.Unlock()
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			ex.Received = time.Now()
			mu.Unlock()
		},
	})
	resp, _, err := c.do(ctx, r)
	mu.Lock()
	got := ex
	mu.Unlock()
	if got.Sent.IsZero() || got.Received.Before(got.Sent) {
		got = exchange{} // not observed: no round trip to report
	}
	if err != nil {
		return nil, got, guestError(fmt.Errorf("%w (command %s)", err, cmd))
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(resp, &result); err != nil {
		return nil, got, fmt.Errorf("veil: decoding %s (command %s): %w", r, cmd, err)
	}
	v, ok := result[cmd]
	if !ok {
		return nil, got, fmt.Errorf("veil: decoding %s: the answer has no key %q", r, cmd)
	}
	return v, got, nil
}

// guestResult runs cmd with empty fargs and decodes its result into v. A result that does not
// decode is told to c.Reject (collection cmd, id the domain's).
func (c *Client) guestResult(ctx context.Context, id, cmd string, timeout time.Duration, v any) error {
	raw, _, err := c.guestCommand(ctx, id, cmd, nil, timeout)
	if err != nil {
		return err
	}
	if err := decodeValue(raw, v); err != nil {
		c.Reject(rejectionOf(cmd, capID(id), err))
		return fmt.Errorf("veil: decoding %s result: %w", cmd, err)
	}
	return nil
}

// guestList runs cmd with empty fargs and decodes its result, a list, entry by entry: an entry
// that does not decode is left out and told to c.Reject (collection cmd, id the domain's), the
// others are kept. A result that is not a list fails.
func guestList[T any](ctx context.Context, c *Client, id, cmd string, timeout time.Duration) ([]T, error) {
	raw, _, err := c.guestCommand(ctx, id, cmd, nil, timeout)
	if err != nil {
		return nil, err
	}
	return decodeGuestList[T](c, id, cmd, raw)
}

func decodeGuestList[T any](c *Client, id, cmd string, raw []byte) ([]T, error) {
	var entries []json.RawMessage
	if err := decodeValue(raw, &entries); err != nil {
		c.Reject(rejectionOf(cmd, capID(id), err))
		return nil, fmt.Errorf("veil: decoding %s result: %w", cmd, err)
	}
	if entries == nil {
		return nil, nil
	}
	out := make([]T, 0, len(entries))
	for i, e := range entries {
		var v T
		if err := decodeValue(e, &v); err != nil {
			c.Reject(rejectionOf(cmd, capID(id), fmt.Errorf("entry %d: %w", i, err)))
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// GuestPing sends guest-ping and returns the round trip of the request on the wire (0 when the
// transport could not tell).
func (c *Client) GuestPing(ctx context.Context, id string, timeout time.Duration) (time.Duration, error) {
	_, ex, err := c.guestCommand(ctx, id, "guest-ping", nil, timeout)
	if ex.Sent.IsZero() {
		return 0, err
	}
	return ex.roundTrip(), err
}

// GuestOSInfo reads guest-get-osinfo.
func (c *Client) GuestOSInfo(ctx context.Context, id string, timeout time.Duration) (*GuestOSInfo, error) {
	v := new(GuestOSInfo)
	if err := c.guestResult(ctx, id, "guest-get-osinfo", timeout, v); err != nil {
		return nil, err
	}
	return v, nil
}

// GuestFSInfo reads guest-get-fsinfo.
func (c *Client) GuestFSInfo(ctx context.Context, id string, timeout time.Duration) ([]GuestFilesystem, error) {
	return guestList[GuestFilesystem](ctx, c, id, "guest-get-fsinfo", timeout)
}

// GuestNetworkInterfaces reads guest-network-get-interfaces: the guest's interfaces with their
// addresses and, when the agent reports them, their counters.
func (c *Client) GuestNetworkInterfaces(ctx context.Context, id string, timeout time.Duration) ([]GuestNetworkInterface, error) {
	return guestList[GuestNetworkInterface](ctx, c, id, "guest-network-get-interfaces", timeout)
}

// GuestInfo reads guest-info.
func (c *Client) GuestInfo(ctx context.Context, id string, timeout time.Duration) (*GuestInfo, error) {
	v := new(GuestInfo)
	if err := c.guestResult(ctx, id, "guest-info", timeout, v); err != nil {
		return nil, err
	}
	return v, nil
}

// GuestClock is one reading of the guest's clock with the timing of the request that read it.
type GuestClock struct {
	Time     time.Time // the guest's clock
	Sent     time.Time // the request was written (local clock)
	Received time.Time // the answer's first byte arrived (local clock)
}

// RoundTrip is the time the request spent on the wire and at the platform.
func (g GuestClock) RoundTrip() time.Duration { return g.Received.Sub(g.Sent) }

// Offset is the guest's clock minus the local clock at the middle of the round trip, the
// instant the guest most likely read its clock.
func (g GuestClock) Offset() time.Duration {
	mid := g.Sent.Add(g.RoundTrip() / 2)
	return g.Time.Sub(mid)
}

// GuestTime reads guest-get-time: nanoseconds since the epoch, an integer (read exactly) or,
// leniently, a float or a numeric string. When the transport could not tell when the request
// went, Sent and Received are the start and end of the call.
func (c *Client) GuestTime(ctx context.Context, id string, timeout time.Duration) (GuestClock, error) {
	start := time.Now()
	raw, ex, err := c.guestCommand(ctx, id, "guest-get-time", nil, timeout)
	if err != nil {
		return GuestClock{}, err
	}
	if ex.Sent.IsZero() {
		ex = exchange{Sent: start, Received: time.Now()}
	}
	t, err := guestNanos(raw)
	if err != nil {
		return GuestClock{}, err
	}
	return GuestClock{Time: t, Sent: ex.Sent, Received: ex.Received}, nil
}

// guestNanos decodes the result of guest-get-time.
func guestNanos(raw []byte) (time.Time, error) {
	s := bytes.TrimSpace(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = bytes.TrimSpace(s[1 : len(s)-1])
	}
	var n json.Number
	if err := json.Unmarshal(s, &n); err == nil {
		if i, err := n.Int64(); err == nil && i > 0 {
			return time.Unix(0, i), nil
		}
		if f, err := n.Float64(); err == nil && f > 0 && f < math.MaxInt64 {
			return time.Unix(0, int64(f)), nil
		}
	}
	return time.Time{}, fmt.Errorf("veil: decoding guest-get-time result: %s is not nanoseconds", short(raw))
}

// guestError wraps a failed guest call with ErrGuestTimeout, ErrAgentNotRunning or
// ErrGuestUnsupported when the failure is one of those; other errors are returned as they are.
func guestError(err error) error {
	if kind := guestErrorKind(err); kind != nil {
		return fmt.Errorf("%w: %w", err, kind)
	}
	return err
}

// guestErrorKind classifies a guest call failure from what the platform answered. A deadline
// (the request's on the wire, or the caller's) or an API message saying timeout is a timeout;
// a message about the agent not running or not connected, or the VM not running, is
// ErrAgentNotRunning; an unknown or unsupported command is ErrGuestUnsupported.
func guestErrorKind(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrGuestTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrGuestTimeout
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return nil
	}
	msg := strings.ToLower(ae.Message + " " + ae.Snippet)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(msg, w) {
				return true
			}
		}
		return false
	}
	switch {
	case ae.StatusCode == http.StatusGatewayTimeout:
		return ErrGuestTimeout
	case vmNotRunning(msg):
		// The VM stopped since the caller's inventory was read: nothing inside it can answer.
		// Checked before the timeout words, which a VM name quoted in the message may contain.
		return ErrAgentNotRunning
	case has("timeout", "timed out", "time out"):
		return ErrGuestTimeout
	case has("agent") && has("not running", "not connected", "not active", "inactive", "unavailable", "not responding", "is off", "disconnected", "no guest agent", "not installed"):
		return ErrAgentNotRunning
	case ae.Field == "qemu_cmd" || has("not supported", "unsupported", "command not found", "unknown command",
		"not allowed", "disabled", "not implemented", "is not available", "linux guests only",
		"has not been found") || // QEMU's agent: "The command guest-x has not been found"
		has("unknown") && has("command"):
		return ErrGuestUnsupported
	}
	return nil
}

// vmNotRunning recognises the platform's refusal because the VM itself is off ("Virtual machine
// X is not running."), as opposed to its agent being off, in a lower-cased message.
func vmNotRunning(msg string) bool {
	if strings.Contains(msg, "agent") {
		return false
	}
	for _, w := range []string{"is not running", "powered off", "shut off", "is stopped"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}
