package veil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"
)

// guestMargin is how much longer than the guest's own timeout the HTTP request may take: the
// platform answers with its timeout error only after the guest's time is up.
const guestMargin = 2 * time.Second

func (c *Client) availableGuestCommands(ctx context.Context, id string) ([]string, error) {
	v, err := get[struct {
		Cmds []string `json:"qemu_available_cmds"`
	}](ctx, c, "/api/domains/{id}/available-guest-cmds/", id)
	if err != nil {
		return nil, err
	}
	return v.Cmds, nil
}

// guestCommand POSTs {"qemu_cmd","fargs","timeout"} and returns the value under the key named
// cmd. It is never retried: it carries no idempotency key, and the guest checker counts
// failures itself. timeout (rounded up to whole seconds) is sent when positive; the request is
// allowed that long plus a margin, or the client's Timeout if longer.
func (c *Client) guestCommand(ctx context.Context, id, cmd string, fargs any, timeout time.Duration) ([]byte, error) {
	r, err := newRequest(http.MethodPost, "/api/domains/{id}/guest-command/", id)
	if err != nil {
		return nil, err
	}
	if cmd == "" {
		return nil, fmt.Errorf("veil: %s: empty command", r)
	}
	if fargs == nil {
		fargs = struct{}{}
	}
	body := map[string]any{"qemu_cmd": cmd, "fargs": fargs}
	if timeout > 0 {
		body["timeout"] = int(math.Ceil(timeout.Seconds()))
		r.timeout = timeout + guestMargin
	}
	if r.body, err = json.Marshal(body); err != nil {
		return nil, fmt.Errorf("veil: %s %s: encoding fargs: %w", r, cmd, err)
	}
	resp, _, err := c.do(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%w (command %s)", err, cmd)
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(resp, &result); err != nil {
		return nil, fmt.Errorf("veil: decoding %s (command %s): %w", r, cmd, err)
	}
	v, ok := result[cmd]
	if !ok {
		return nil, fmt.Errorf("veil: decoding %s: the answer has no key %q", r, cmd)
	}
	return v, nil
}

// guestResult runs cmd with empty fargs and decodes its result into v.
func guestResult(ctx context.Context, c *Client, id, cmd string, timeout time.Duration, v any) error {
	raw, err := c.guestCommand(ctx, id, cmd, nil, timeout)
	if err != nil {
		return err
	}
	if err := decodeValue(raw, v); err != nil {
		return fmt.Errorf("veil: decoding %s result: %w", cmd, err)
	}
	return nil
}

func (c *Client) guestPing(ctx context.Context, id string, timeout time.Duration) error {
	_, err := c.guestCommand(ctx, id, "guest-ping", nil, timeout)
	return err
}

func (c *Client) guestOSInfo(ctx context.Context, id string, timeout time.Duration) (*GuestOSInfo, error) {
	v := new(GuestOSInfo)
	if err := guestResult(ctx, c, id, "guest-get-osinfo", timeout, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (c *Client) guestFSInfo(ctx context.Context, id string, timeout time.Duration) ([]GuestFilesystem, error) {
	var v []GuestFilesystem
	if err := guestResult(ctx, c, id, "guest-get-fsinfo", timeout, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// guestTime reads guest-get-time: nanoseconds since the epoch, an integer (read exactly) or,
// leniently, a float or numeric string.
func (c *Client) guestTime(ctx context.Context, id string, timeout time.Duration) (time.Time, error) {
	raw, err := c.guestCommand(ctx, id, "guest-get-time", nil, timeout)
	if err != nil {
		return time.Time{}, err
	}
	raw = bytes.Trim(bytes.TrimSpace(raw), `"`)
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if i, err := n.Int64(); err == nil {
			return time.Unix(0, i), nil
		}
		if f, err := n.Float64(); err == nil && f > 0 && f < math.MaxInt64 {
			return time.Unix(0, int64(f)), nil
		}
	}
	return time.Time{}, fmt.Errorf("veil: decoding guest-get-time result: %s is not nanoseconds", short(raw))
}

func (c *Client) guestInfo(ctx context.Context, id string, timeout time.Duration) (*GuestInfo, error) {
	v := new(GuestInfo)
	if err := guestResult(ctx, c, id, "guest-info", timeout, v); err != nil {
		return nil, err
	}
	return v, nil
}
