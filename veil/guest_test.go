package veil_test

import (
	"context"
	"encoding/json"
	"errors"
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
	if err != nil || len(cmds) != 40 {
		t.Fatalf("AvailableGuestCommands = %d names, %v; want the 40 of the spec", len(cmds), err)
	}
	for _, want := range []string{"guest-ping", "guest-get-osinfo", "guest-get-fsinfo", "guest-get-time", "guest-info"} {
		if !strings.Contains(strings.Join(cmds, " "), want) {
			t.Errorf("%s not available", want)
		}
	}
	if err := c.GuestPing(ctx, vm.ID, 2*time.Second); err != nil {
		t.Fatalf("GuestPing: %v", err)
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
	if off := time.Until(gt); off < 80*time.Second || off > 100*time.Second {
		t.Errorf("guest clock offset %v, want about 90s", off)
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

func TestGuestErrorReason(t *testing.T) {
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

	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"success has no reason", func(ctx context.Context) error { return c.GuestPing(ctx, fine, time.Second) }, ""},
		{"agent stopped", func(ctx context.Context) error { return c.GuestPing(ctx, agentOff, time.Second) }, "agent_not_running"},
		{"hung agent answers with a timeout", func(ctx context.Context) error { return c.GuestPing(ctx, hung, time.Second) }, "timeout"},
		{"caller's deadline", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return c.GuestPing(ctx, hung, 5*time.Second)
		}, "timeout"},
		{"unknown command", func(ctx context.Context) error {
			_, err := c.GuestCommand(ctx, fine, "guest-no-such-thing", nil, time.Second)
			return err
		}, "not_supported"},
		{"windows guest", func(ctx context.Context) error { return c.GuestPing(ctx, windows, time.Second) }, "not_supported"},
		{"unknown domain", func(ctx context.Context) error { return c.GuestPing(ctx, "nope", time.Second) }, "api_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(context.Background())
			if got := veil.GuestErrorReason(err); got != tc.want {
				t.Fatalf("GuestErrorReason(%v) = %q, want %q", err, got, tc.want)
			}
		})
	}
}

func TestGuestErrorReasonOfPlainErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{context.DeadlineExceeded, "timeout"},
		{errors.New("connection refused"), "api_error"},
		{&veil.APIError{StatusCode: 400, Message: "Guest agent is not connected"}, "agent_not_running"},
		{&veil.APIError{StatusCode: 400, Message: "QEMU guest agent is not running"}, "agent_not_running"},
		{&veil.APIError{StatusCode: 400, Message: "Command guest-exec not supported"}, "not_supported"},
		{&veil.APIError{StatusCode: 500, Message: "Guest agent command timed out"}, "timeout"},
		{&veil.APIError{StatusCode: 500, Message: "Internal server error"}, "api_error"},
	} {
		if got := veil.GuestErrorReason(tc.err); got != tc.want {
			t.Errorf("GuestErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
