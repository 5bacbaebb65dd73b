package guest

// The guest checker's calls to guest agents (guestCommands): the only path by which a command is
// sent (through the read-only allowlist, with the command timeout on the wire), the shared sets
// of commands the guests offer, what a visit reads of what is due, and what is kept of each
// answer. It holds no VM state and takes no lock of the checker's: a failed call is reported
// through failed (the checker counts it).

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/veil"
)

// errGuestCommandRefused is returned for a command outside the read-only allowlist.
var errGuestCommandRefused = errors.New("guest command refused: not in the read-only allowlist")

// guestCommands sends the checker's guest commands and reads their answers.
type guestCommands struct {
	client    *veil.Client
	cfg       config.Guest
	mountsOut *regexp.Regexp // fs_mountpoints_exclude; nil: none
	nicsOut   *regexp.Regexp // network_interfaces_exclude; nil: none
	disksOut  *regexp.Regexp // disk_devices_exclude; nil: none
	// failed counts a failed call (not one our own shutdown ended): the command, its reason
	// label (guestReason) and the error.
	failed func(id, cmd, reason string, err error)

	// offered are the distinct sets of commands guests offer (offeredSet).
	offeredMu sync.Mutex
	offered   map[string]map[string]bool
}

// newGuestCommands sends through client, within cfg (timeout, exclusions, intervals), and counts
// failures with failed.
func newGuestCommands(client *veil.Client, cfg config.Guest, failed func(id, cmd, reason string, err error)) *guestCommands {
	return &guestCommands{client: client, cfg: cfg, failed: failed, mountsOut: cfg.FSMountpointsExclude.Regexp(),
		nicsOut: cfg.NetworkInterfacesExclude.Regexp(), disksOut: cfg.DiskDevicesExclude.Regexp()}
}

// reconnected plans the visit of an agent back after missed pings, maybe restarted or
// upgraded: what it offers and who it is are asked again, and its measurements refreshed now
// rather than at their phase.
func (c *guestCommands) reconnected(ctx context.Context, id string, p *checkPlan, r *checkResult) {
	r.reconnect = true
	if p.offered != nil {
		if offered, err := c.available(ctx, id); err == nil {
			r.offered = offered
		}
	}
	p.os, p.fs, p.time, p.net = true, c.cfg.FSInfoInterval > 0, c.cfg.TimeInterval > 0, true
	p.stats = c.cfg.StatsInterval > 0
}

// readDue reads what p says is due and the guest offers into r.
func (c *guestCommands) readDue(ctx context.Context, id string, p checkPlan, r *checkResult) {
	if p.os && r.offered[guestCmdOSInfo] {
		r.os, _ = c.osInfo(ctx, id)
	}
	if p.fs && r.offered[guestCmdFSInfo] {
		fs, err := c.fsInfo(ctx, id)
		r.fs, r.fsDone = fs, err == nil
	}
	if p.time && r.offered[guestCmdTime] {
		off, err := c.clockOffset(ctx, id)
		r.clock, r.timeDone = off, err == nil
	}
	if p.net && r.offered[guestCmdInterfaces] {
		nics, ipv6, err := c.interfaces(ctx, id)
		r.nics, r.ipv6, r.netDone = nics, ipv6, err == nil
	}
	if p.stats {
		c.readStats(ctx, id, r.offered, r)
	}
}

// call sends one allowlisted command with send and counts its failure. It is the only path by
// which the checker sends guest commands.
func (c *guestCommands) call(ctx context.Context, id, cmd string, send func() error) error {
	if !guestCommandAllowed(cmd) {
		return fmt.Errorf("%s: %w", cmd, errGuestCommandRefused)
	}
	if err := send(); err != nil {
		if ctx.Err() == nil { // not our own shutdown
			c.failed(id, cmd, guestReason(err), err)
		}
		return fmt.Errorf("guest command %s on %s: %w", cmd, id, err)
	}
	return nil
}

// available asks which guest commands the VM's agent offers (available-guest-cmds), as one of
// the shared sets of those the checker may send.
func (c *guestCommands) available(ctx context.Context, id string) (map[string]bool, error) {
	list, err := c.client.AvailableGuestCommands(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			c.failed(id, guestCmdAvailable, guestReason(err), err)
		}
		return nil, fmt.Errorf("available guest commands of %s: %w", id, err)
	}
	return c.offeredSet(list), nil
}

// offeredSet is the set of the commands in list that the checker may send. Guests offer the
// same few sets: one map per distinct set is shared by every VM offering it (read only), not
// one per VM of every command the agent lists.
func (c *guestCommands) offeredSet(list []string) map[string]bool {
	known := make([]string, 0, 8)
	for _, cmd := range list {
		if guestCommandAllowed(cmd) && !slices.Contains(known, cmd) {
			known = append(known, cmd)
		}
	}
	slices.Sort(known)
	key := strings.Join(known, ",")
	c.offeredMu.Lock()
	defer c.offeredMu.Unlock()
	if m, ok := c.offered[key]; ok {
		return m
	}
	m := make(map[string]bool, len(known))
	for _, cmd := range known {
		m[cmd] = true
	}
	if c.offered == nil {
		c.offered = map[string]map[string]bool{}
	}
	c.offered[key] = m
	return m
}

func (c *guestCommands) ping(ctx context.Context, id string) (float64, error) {
	var rtt time.Duration
	err := c.call(ctx, id, guestCmdPing, func() (err error) {
		rtt, err = c.client.GuestPing(ctx, id, c.cfg.CommandTimeout)
		return err
	})
	return rtt.Seconds(), err
}

func (c *guestCommands) osInfo(ctx context.Context, id string) (*veil.GuestOSInfo, error) {
	var info *veil.GuestOSInfo
	err := c.call(ctx, id, guestCmdOSInfo, func() (err error) {
		info, err = c.client.GuestOSInfo(ctx, id, c.cfg.CommandTimeout)
		return err
	})
	return info, err
}

func (c *guestCommands) fsInfo(ctx context.Context, id string) ([]guestFS, error) {
	var list []veil.GuestFilesystem
	err := c.call(ctx, id, guestCmdFSInfo, func() (err error) {
		list, err = c.client.GuestFSInfo(ctx, id, c.cfg.CommandTimeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	fs, cut := guestFilesystems(list, c.cfg.FSTypesExclude, c.mountsOut)
	if cut > 0 {
		c.client.Reject(veil.Rejection{Collection: guestCmdFSInfo, ID: id, Reason: veil.RejectOverLimit, Count: cut,
			Err: fmt.Errorf("the guest reports %d filesystems more than the %d exported per VM", cut, maxGuestDevices)})
	}
	return fs, nil
}

// clockOffset is guest time minus exporter time at the middle of the round trip.
func (c *guestCommands) clockOffset(ctx context.Context, id string) (float64, error) {
	var clock veil.GuestClock
	err := c.call(ctx, id, guestCmdTime, func() (err error) {
		clock, err = c.client.GuestTime(ctx, id, c.cfg.CommandTimeout)
		return err
	})
	return clock.Offset().Seconds(), err
}

// interfaces reads the guest's interfaces: their counters, and its first IPv6 address that
// service discovery may hand out.
func (c *guestCommands) interfaces(ctx context.Context, id string) ([]guestNIC, string, error) {
	var list []veil.GuestNetworkInterface
	err := c.call(ctx, id, guestCmdInterfaces, func() (err error) {
		list, err = c.client.GuestNetworkInterfaces(ctx, id, c.cfg.CommandTimeout)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return guestInterfaces(list, c.nicsOut), guestIPv6(list, c.nicsOut), nil
}

// readStats reads the statistics the guest offers, each command on its own: a command the guest
// refuses or answers wrongly leaves that family of the VM empty (no stale counters, nothing
// invented), its error counted, the others read as usual.
func (c *guestCommands) readStats(ctx context.Context, id string, offered map[string]bool, r *checkResult) {
	r.statsDone = true
	if offered[guestCmdDiskStats] {
		var list []veil.GuestDiskStats
		if c.call(ctx, id, guestCmdDiskStats, func() (err error) {
			list, err = c.client.GuestDiskStats(ctx, id, c.cfg.CommandTimeout)
			return err
		}) == nil {
			r.disks = guestDisks(list, c.disksOut)
		}
	}
	if offered[guestCmdCPUStats] {
		var list []veil.GuestCPUStats
		if c.call(ctx, id, guestCmdCPUStats, func() (err error) {
			list, err = c.client.GuestCPUStats(ctx, id, c.cfg.CommandTimeout)
			return err
		}) == nil {
			r.cpu = guestCPUSeconds(list)
		}
	}
	if offered[guestCmdLoad] {
		var l veil.GuestLoad
		if c.call(ctx, id, guestCmdLoad, func() (err error) {
			l, err = c.client.GuestLoad(ctx, id, c.cfg.CommandTimeout)
			return err
		}) == nil {
			r.load = guestLoadAverages(l)
		}
	}
}

// guestReason is the reason label of veil_guest_command_errors_total for a failed call:
// timeout, agent_not_running, not_supported, bad_answer (a statistics command's result of the
// wrong shape: the guest's agent, not the controller), or api_error for everything else (the
// controller failed, or answered something unreadable).
func guestReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, veil.ErrGuestTimeout):
		return "timeout"
	case errors.Is(err, veil.ErrAgentNotRunning):
		return "agent_not_running"
	case errors.Is(err, veil.ErrGuestUnsupported):
		return "not_supported"
	case errors.Is(err, veil.ErrGuestAnswer):
		return "bad_answer"
	}
	return "api_error"
}
