package veil

// The statistics newer guest agents offer (QEMU qga/qapi-schema.json): guest-get-diskstats and
// guest-get-cpustats (QEMU 7.1, Linux guests) and guest-get-load (QEMU 10.0). Every statistic
// is optional in the schema, so each is a *float64: nil when the agent left it out, sent null,
// or sent something that is not a number; a number sent as a string ("123") is read. Nothing
// absent is read as 0: a zero would become a series the guest never reported.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrGuestAnswer: the guest's answer to a statistics command is not of the shape the schema
// gives (not a list of disks, not a list of CPUs, not an object). It is the guest's (its
// agent's) answer that is wrong, not the controller.
var ErrGuestAnswer = errors.New("guest answer of an unexpected shape")

// GuestDiskStats is one disk of guest-get-diskstats, as the guest's /proc/diskstats shows it:
// counters since the guest booted, sectors of 512 bytes, ticks in milliseconds.
type GuestDiskStats struct {
	Name  string
	Major *float64
	Minor *float64
	Stats GuestDiskStatValues
}

// GuestDiskStatValues are a disk's counters; nil when the guest did not report one.
type GuestDiskStatValues struct {
	ReadSectors, WriteSectors, DiscardSectors *float64
	ReadIOs, WriteIOs, DiscardIOs, FlushIOs   *float64
	ReadMerges, WriteMerges, DiscardMerges    *float64
	ReadTicks, WriteTicks, DiscardTicks       *float64
	FlushTicks                                *float64
	IOsPgr, TotalTicks, WeightTicks           *float64 // ios-pgr is in flight now, not a counter
}

// GuestCPUStats is one CPU of guest-get-cpustats. Type is "linux" for the only kind the schema
// knows; its times are in the guest's clock ticks (USER_HZ, 100 per second on Linux), since the
// guest booted. CPU is the CPU's number.
type GuestCPUStats struct {
	Type                        string
	CPU                         *float64
	User, Nice, System, Idle    *float64
	IOWait, IRQ, SoftIRQ, Steal *float64
	Guest, GuestNice            *float64
}

// GuestLoad is guest-get-load: the guest's load averages.
type GuestLoad struct {
	Load1, Load5, Load15 *float64
}

// GuestDiskStats reads guest-get-diskstats.
func (c *Client) GuestDiskStats(ctx context.Context, id string, timeout time.Duration) ([]GuestDiskStats, error) {
	raw, _, err := c.guestCommand(ctx, id, "guest-get-diskstats", nil, timeout)
	if err != nil {
		return nil, err
	}
	return decodeGuestDiskStats(c, id, raw)
}

// GuestCPUStats reads guest-get-cpustats.
func (c *Client) GuestCPUStats(ctx context.Context, id string, timeout time.Duration) ([]GuestCPUStats, error) {
	raw, _, err := c.guestCommand(ctx, id, "guest-get-cpustats", nil, timeout)
	if err != nil {
		return nil, err
	}
	return decodeGuestCPUStats(c, id, raw)
}

// GuestLoad reads guest-get-load.
func (c *Client) GuestLoad(ctx context.Context, id string, timeout time.Duration) (GuestLoad, error) {
	raw, _, err := c.guestCommand(ctx, id, "guest-get-load", nil, timeout)
	if err != nil {
		return GuestLoad{}, err
	}
	return decodeGuestLoad(raw)
}

// guestObjects splits a JSON list of objects into their fields; an entry that is not an object
// is skipped (nothing can be read of it) and told to c.Reject (collection cmd, id the domain's;
// c may be nil), a value that is not a list fails.
func guestObjects(c *Client, id, cmd string, raw []byte) ([]map[string]json.RawMessage, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, fmt.Errorf("veil: decoding %s result: %s is not a list: %w", cmd, short(raw), ErrGuestAnswer)
	}
	out := make([]map[string]json.RawMessage, 0, len(list))
	for i, e := range list {
		var m map[string]json.RawMessage
		if json.Unmarshal(e, &m) == nil && m != nil {
			out = append(out, m)
			continue
		}
		c.Reject(rejectionOf(cmd, capID(id), fmt.Errorf("entry %d: %s is not an object", i, short(e))))
	}
	return out, nil
}

func decodeGuestDiskStats(c *Client, id string, raw []byte) ([]GuestDiskStats, error) {
	objs, err := guestObjects(c, id, "guest-get-diskstats", raw)
	if err != nil {
		return nil, err
	}
	out := make([]GuestDiskStats, 0, len(objs))
	for _, m := range objs {
		d := GuestDiskStats{Name: guestString(m["name"]), Major: guestStat(m["major"]), Minor: guestStat(m["minor"])}
		var s map[string]json.RawMessage
		if json.Unmarshal(m["stats"], &s) == nil {
			v := &d.Stats
			for key, dst := range map[string]**float64{
				"read-sectors": &v.ReadSectors, "write-sectors": &v.WriteSectors, "discard-sectors": &v.DiscardSectors,
				"read-ios": &v.ReadIOs, "write-ios": &v.WriteIOs, "discard-ios": &v.DiscardIOs, "flush-ios": &v.FlushIOs,
				"read-merges": &v.ReadMerges, "write-merges": &v.WriteMerges, "discard-merges": &v.DiscardMerges,
				"read-ticks": &v.ReadTicks, "write-ticks": &v.WriteTicks, "discard-ticks": &v.DiscardTicks,
				"flush-ticks": &v.FlushTicks, "ios-pgr": &v.IOsPgr, "total-ticks": &v.TotalTicks, "weight-ticks": &v.WeightTicks,
			} {
				*dst = guestStat(s[key])
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func decodeGuestCPUStats(cl *Client, id string, raw []byte) ([]GuestCPUStats, error) {
	objs, err := guestObjects(cl, id, "guest-get-cpustats", raw)
	if err != nil {
		return nil, err
	}
	out := make([]GuestCPUStats, 0, len(objs))
	for _, m := range objs {
		c := GuestCPUStats{Type: guestString(m["type"]), CPU: guestStat(m["cpu"])}
		for key, dst := range map[string]**float64{
			"user": &c.User, "nice": &c.Nice, "system": &c.System, "idle": &c.Idle, "iowait": &c.IOWait,
			"irq": &c.IRQ, "softirq": &c.SoftIRQ, "steal": &c.Steal, "guest": &c.Guest, "guestnice": &c.GuestNice,
		} {
			*dst = guestStat(m[key])
		}
		out = append(out, c)
	}
	return out, nil
}

func decodeGuestLoad(raw []byte) (GuestLoad, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return GuestLoad{}, fmt.Errorf("veil: decoding guest-get-load result: %s is not an object: %w", short(raw), ErrGuestAnswer)
	}
	return GuestLoad{Load1: guestStat(m["load1"]), Load5: guestStat(m["load5"]), Load15: guestStat(m["load15"])}, nil
}

// guestStat reads one optional statistic: a JSON number or a numeric string; nil for anything
// else (absent, null, "", text, an object, NaN or infinite). Negative values are returned as
// sent: whether they make sense is for the caller to judge.
func guestStat(raw json.RawMessage) *float64 {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		if json.Unmarshal(b, &s) != nil {
			return nil
		}
		s = strings.TrimSpace(s)
	} else if b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return nil // null, true, an object, a list
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// guestString reads a JSON string; "" for anything else.
func guestString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
