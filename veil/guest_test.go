package veil_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func TestGuestCommands(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 20, VMs: 30})
	c := newClient(t, sim, nil)
	ctx := context.Background()
	vm := findDomain(t, sim, guestReady)
	if err := sim.SetClockOffset(vm.ID, 90*time.Second); err != nil {
		t.Fatal(err)
	}

	cmds, err := c.AvailableGuestCommands(ctx, vm.ID)
	if err != nil || len(cmds) < 40 || len(cmds) != len(vm.GuestCommands) {
		t.Fatalf("AvailableGuestCommands = %d names, %v; want the 40 of the spec, or %d for a newer agent", len(cmds), err, len(vm.GuestCommands))
	}
	for _, want := range []string{"guest-ping", "guest-get-osinfo", "guest-get-fsinfo", "guest-get-time", "guest-info"} {
		if !strings.Contains(strings.Join(cmds, " "), want) {
			t.Errorf("%s not available", want)
		}
	}
	rtt, err := c.GuestPing(ctx, vm.ID, 2*time.Second)
	if err != nil || rtt <= 0 {
		t.Fatalf("GuestPing = %v, %v; want a round trip", rtt, err)
	}
	osinfo, err := c.GuestOSInfo(ctx, vm.ID, 2*time.Second)
	if err != nil || osinfo.ID == "" || osinfo.KernelRelease == "" {
		t.Fatalf("GuestOSInfo = %+v, %v", osinfo, err)
	}
	fs, err := c.GuestFSInfo(ctx, vm.ID, 2*time.Second)
	if err != nil || len(fs) < 2 {
		t.Fatalf("GuestFSInfo = %+v, %v", fs, err)
	}
	var tmpfs, sized, unsized bool
	for _, f := range fs {
		tmpfs = tmpfs || f.Type == "tmpfs"
		if f.TotalBytes != nil && *f.TotalBytes > 0 && f.UsedBytes != nil {
			sized = true
		}
		unsized = unsized || f.TotalBytes == nil
	}
	if !tmpfs || !sized || !unsized {
		t.Errorf("fsinfo lacks a tmpfs, a sized or an unsized mount: %+v", fs)
	}
	gt, err := c.GuestTime(ctx, vm.ID, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if off := gt.Offset(); off < 89*time.Second || off > 91*time.Second {
		t.Errorf("guest clock offset %v, want about 90s", off)
	}
	if gt.RoundTrip() <= 0 || gt.Received.After(time.Now()) {
		t.Errorf("round trip %v (sent %v, received %v)", gt.RoundTrip(), gt.Sent, gt.Received)
	}
	nics, err := c.GuestNetworkInterfaces(ctx, vm.ID, 2*time.Second)
	if err != nil || len(nics) == 0 || nics[0].Name == "" {
		t.Fatalf("GuestNetworkInterfaces = %+v, %v", nics, err)
	}
	info, err := c.GuestInfo(ctx, vm.ID, 2*time.Second)
	if err != nil || info.Version == "" || len(info.SupportedCommands) == 0 {
		t.Fatalf("GuestInfo = %+v, %v", info, err)
	}
	raw, err := c.GuestCommand(ctx, vm.ID, "guest-get-host-name", map[string]any{}, time.Second)
	var host struct {
		HostName string `json:"host-name"`
	}
	if err != nil || json.Unmarshal(raw, &host) != nil || host.HostName == "" {
		t.Fatalf("GuestCommand(guest-get-host-name) = %s, %v", raw, err)
	}
	var body struct {
		Cmd     string          `json:"qemu_cmd"`
		Fargs   json.RawMessage `json:"fargs"`
		Timeout int             `json:"timeout"`
	}
	reqs := requestsTo(sim, "POST", "/api/domains/"+vm.ID+"/guest-command")
	if err := json.Unmarshal([]byte(reqs[len(reqs)-1].Body), &body); err != nil ||
		body.Cmd != "guest-get-host-name" || string(body.Fargs) != "{}" || body.Timeout != 1 {
		t.Errorf("guest-command body %s: %+v, %v", reqs[len(reqs)-1].Body, body, err)
	}
}

// TestGuestErrorsAreTyped: each way a guest command fails against the simulator gives the typed
// error callers test with errors.Is, and nothing else.
func TestGuestErrorsAreTyped(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 21, VMs: 60})
	c := newClient(t, sim, nil)
	ready := sim.DomainIDs()
	pick := func(ok func(veiltest.DomainInfo) bool, used map[string]bool) string {
		for _, id := range ready {
			if d, _ := sim.Domain(id); ok(d) && !used[id] {
				used[id] = true
				return id
			}
		}
		t.Fatal("no such domain")
		return ""
	}
	used := map[string]bool{}
	agentOff := pick(guestReady, used)
	if err := sim.SetGuestAgent(agentOff, false); err != nil {
		t.Fatal(err)
	}
	hung := pick(guestReady, used)
	if err := sim.SetGuestHang(hung, true); err != nil {
		t.Fatal(err)
	}
	windows := pick(func(d veiltest.DomainInfo) bool { return !d.Linux && d.PowerState == veil.PowerOn }, used)
	fine := pick(guestReady, used)

	ping := func(ctx context.Context, id string, timeout time.Duration) error {
		_, err := c.GuestPing(ctx, id, timeout)
		return err
	}
	kinds := []error{veil.ErrGuestTimeout, veil.ErrAgentNotRunning, veil.ErrGuestUnsupported}
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		want error // nil: none of the guest errors
	}{
		{"success", func(ctx context.Context) error { return ping(ctx, fine, time.Second) }, nil},
		{"agent stopped", func(ctx context.Context) error { return ping(ctx, agentOff, time.Second) }, veil.ErrAgentNotRunning},
		{"hung agent answers with a timeout", func(ctx context.Context) error { return ping(ctx, hung, time.Second) }, veil.ErrGuestTimeout},
		{"caller's deadline", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return ping(ctx, hung, 5*time.Second)
		}, veil.ErrGuestTimeout},
		{"unknown command", func(ctx context.Context) error {
			_, err := c.GuestCommand(ctx, fine, "guest-get-no-such-thing", nil, time.Second)
			return err
		}, veil.ErrGuestUnsupported},
		{"windows guest", func(ctx context.Context) error { return ping(ctx, windows, time.Second) }, veil.ErrGuestUnsupported},
		{"unknown domain", func(ctx context.Context) error { return ping(ctx, "nope", time.Second) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(context.Background())
			if tc.name == "success" && err != nil || tc.name == "unknown domain" && err == nil {
				t.Fatalf("err = %v", err)
			}
			for _, k := range kinds {
				if got := errors.Is(err, k); got != (k == tc.want) {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, k, got, k == tc.want)
				}
			}
		})
	}
}

// TestGuestTimeoutTimesTheWireNotTheQueue: a guest command's timeout starts when the request
// goes, so calls queued behind a tight rate limit wait for their turn and then succeed,
// however long the queue, instead of timing out in it.
func TestGuestTimeoutTimesTheWireNotTheQueue(t *testing.T) {
	sim := newSim(t, veiltest.Options{Seed: 22, VMs: 30})
	c := newClient(t, sim, func(cfg *veil.Config) { cfg.MaxRequestsPerSecond = 10; cfg.MaxConcurrency = 1 })
	vm := findDomain(t, sim, guestReady)
	const calls = 8 // the last one waits about 0.7s for the rate, far more than its timeout
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.GuestPing(context.Background(), vm.ID, 100*time.Millisecond)
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Errorf("GuestPing behind the rate limit: %v", err)
		}
	}
}

// TestGuestStatsCommandsAgainstTheSimulator: the typed calls read what the guest answered (the
// same answer read raw, at the same simulated instant), an agent without the command is
// ErrGuestUnsupported, and a command the agent offers but fails is an error of the guest.
func TestGuestStatsCommandsAgainstTheSimulator(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	sim := newSim(t, veiltest.Options{Seed: 20, VMs: 40, Now: func() time.Time { return at }})
	c := newClient(t, sim, nil)
	ctx := context.Background()
	offers := func(cmd string) func(veiltest.DomainInfo) bool {
		return func(d veiltest.DomainInfo) bool { return guestReady(d) && slices.Contains(d.GuestCommands, cmd) }
	}
	vm := findDomain(t, sim, offers("guest-get-load"))
	old := findDomain(t, sim, func(d veiltest.DomainInfo) bool { return guestReady(d) && len(d.GuestCommands) == 40 })
	rawOf := func(cmd string, v any) {
		t.Helper()
		raw, err := c.GuestCommand(ctx, vm.ID, cmd, nil, time.Second)
		if err != nil || json.Unmarshal(raw, v) != nil {
			t.Fatalf("%s: %s, %v", cmd, raw, err)
		}
	}

	disks, err := c.GuestDiskStats(ctx, vm.ID, time.Second)
	if err != nil || len(disks) == 0 {
		t.Fatalf("GuestDiskStats = %+v, %v", disks, err)
	}
	var rawDisks []struct {
		Name  string
		Stats map[string]float64
	}
	rawOf("guest-get-diskstats", &rawDisks)
	for i, d := range disks {
		r := rawDisks[i]
		if d.Name != r.Name || d.Stats.ReadSectors == nil || *d.Stats.ReadSectors != r.Stats["read-sectors"] ||
			*d.Stats.WriteIOs != r.Stats["write-ios"] || *d.Stats.TotalTicks != r.Stats["total-ticks"] {
			t.Errorf("disk %d = %+v, the guest answered %+v", i, d, r)
		}
	}
	cpus, err := c.GuestCPUStats(ctx, vm.ID, time.Second)
	var rawCPUs []map[string]any
	rawOf("guest-get-cpustats", &rawCPUs)
	if err != nil || len(cpus) != len(rawCPUs) || len(cpus) == 0 {
		t.Fatalf("GuestCPUStats = %+v, %v; the guest answered %v", cpus, err, rawCPUs)
	}
	for i, p := range cpus {
		if p.Type != "linux" || *p.User != rawCPUs[i]["user"] || *p.Idle != rawCPUs[i]["idle"] || *p.Steal != rawCPUs[i]["steal"] {
			t.Errorf("cpu %d = %+v, the guest answered %v", i, p, rawCPUs[i])
		}
	}
	load, err := c.GuestLoad(ctx, vm.ID, time.Second)
	var rawLoad map[string]float64
	rawOf("guest-get-load", &rawLoad)
	if err != nil || load.Load1 == nil || *load.Load1 != rawLoad["load1"] || *load.Load15 != rawLoad["load15"] {
		t.Errorf("GuestLoad = %+v, %v; the guest answered %v", load, err, rawLoad)
	}

	if _, err := c.GuestDiskStats(ctx, old.ID, time.Second); !errors.Is(err, veil.ErrGuestUnsupported) {
		t.Errorf("diskstats of an older agent: %v, want ErrGuestUnsupported", err)
	}
	if err := sim.SetGuestCommandError(vm.ID, "guest-get-load", "Failed to open file '/proc/loadavg'"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GuestLoad(ctx, vm.ID, time.Second)
	var ae *veil.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 400 || errors.Is(err, veil.ErrGuestUnsupported) || errors.Is(err, veil.ErrGuestTimeout) {
		t.Errorf("a failing offered command: %v, want the platform's 400", err)
	}
}
