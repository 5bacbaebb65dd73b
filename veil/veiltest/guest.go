package veiltest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// guestCommands are exactly the commands the platform's guest agent offers, in the platform's order.
var guestCommands = []string{
	"guest-ssh-remove-authorized-keys", "guest-ssh-add-authorized-keys", "guest-ssh-get-authorized-keys",
	"guest-get-devices", "guest-get-osinfo", "guest-get-timezone", "guest-get-users", "guest-get-host-name",
	"guest-exec", "guest-exec-status", "guest-get-memory-block-info", "guest-set-memory-blocks",
	"guest-get-memory-blocks", "guest-set-user-password", "guest-get-fsinfo", "guest-get-disks",
	"guest-set-vcpus", "guest-get-vcpus", "guest-network-get-interfaces", "guest-suspend-hybrid",
	"guest-suspend-ram", "guest-suspend-disk", "guest-fstrim", "guest-fsfreeze-thaw",
	"guest-fsfreeze-freeze-list", "guest-fsfreeze-freeze", "guest-fsfreeze-status", "guest-file-flush",
	"guest-file-seek", "guest-file-write", "guest-file-read", "guest-file-close", "guest-file-open",
	"guest-shutdown", "guest-info", "guest-set-time", "guest-get-time", "guest-ping", "guest-sync",
	"guest-sync-delimited",
}

// Newer agents offer more (QEMU qga/qapi-schema.json): guest-get-diskstats and
// guest-get-cpustats since QEMU 7.1, guest-get-load since 10.0, all for Linux guests. The agent
// lists its newest commands first.
var (
	guestCommandsStats = slices.Concat([]string{"guest-get-diskstats", "guest-get-cpustats"}, guestCommands)
	guestCommandsLoad  = slices.Concat([]string{"guest-get-load"}, guestCommandsStats)
)

var guestCommandSet = func() map[string]bool {
	m := make(map[string]bool, len(guestCommandsLoad))
	for _, c := range guestCommandsLoad {
		m[c] = true
	}
	return m
}()

// agentSeed is a hash of the VM's id: what its guest is like follows from it, so the same seed
// makes the same guests without drawing from the inventory's random stream.
func (d *domain) agentSeed() uint64 {
	h := fnv.New64a()
	h.Write([]byte(d.id))
	return h.Sum64()
}

// Agent generations of the simulated guests (agentGen).
const (
	agentOld   = iota // the spec's 40 commands
	agentStats        // QEMU 7.1 to 9.x: + guest-get-diskstats, guest-get-cpustats
	agentLoad         // QEMU 10.0 and later: + guest-get-load
)

// agentGen is the generation of the VM's guest agent: about a third of Linux guests each;
// Windows guests offer none of the newer commands (they are Linux only).
func (d *domain) agentGen() int {
	if !d.linux {
		return agentOld
	}
	return int(d.agentSeed() >> 24 % 3)
}

// guestCommands is what available-guest-cmds lists for the VM (read only).
func (d *domain) guestCommands() []string {
	switch d.agentGen() {
	case agentStats:
		return guestCommandsStats
	case agentLoad:
		return guestCommandsLoad
	}
	return guestCommands
}

// agentVersion is what guest-info says of the agent's version.
func (d *domain) agentVersion() string {
	return [...]string{agentOld: "6.2.0", agentStats: "8.2.2", agentLoad: "10.0.0"}[d.agentGen()]
}

// defaultGuestTimeout is the vendor's default command timeout.
const defaultGuestTimeout = 5 * time.Second

func (s *Server) availableGuestCmds(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	d, ok := s.st.domainByID[id]
	var cmds []string
	if ok {
		cmds = d.guestCommands()
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, errNotFound(txt("Virtual machine is not found.", "Виртуальная машина не найдена.")))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"qemu_available_cmds": cmds})
}

func (s *Server) guestCommand(w http.ResponseWriter, r *http.Request, id string) {
	body, e := readBody(r)
	if e != nil {
		writeError(w, e)
		return
	}
	cmd, e := stringField(body, "qemu_cmd", true)
	if e != nil {
		writeError(w, e)
		return
	}
	if !guestCommandSet[cmd] {
		writeError(w, errField("qemu_cmd", "invalid", txtf("Unknown guest agent command %q.", "Неизвестная команда гостевого агента %q.", cmd)))
		return
	}
	fargs, _ := body["fargs"].(map[string]any)
	timeout := defaultGuestTimeout
	if v, ok := body["timeout"]; ok && v != nil {
		n, isNum := v.(json.Number)
		f, err := strconv.ParseFloat(string(n), 64)
		if !isNum || err != nil || f <= 0 {
			writeError(w, errField("timeout", "invalid", txt("A positive number of seconds is required.", "Требуется положительное число секунд.")))
			return
		}
		timeout = time.Duration(f * float64(time.Second))
	}

	s.mu.Lock()
	now := s.now()
	d, ok := s.st.domainByID[id]
	var result any
	switch {
	case !ok:
		e = errNotFound(txt("Virtual machine is not found.", "Виртуальная машина не найдена."))
	case d.power != powerOn:
		e = errRule(txtf("Virtual machine %s is not running.", "Виртуальная машина %s не запущена.", d.name))
	case !d.linux && !s.opts.GuestCommandsWindows:
		e = errRule(txt("Guest commands are available for Linux guests only.", "Гостевые команды доступны только для гостевых ОС Linux."))
	case !d.agentActive():
		e = errRule(txtf("Guest agent of virtual machine %s is not active.", "Гостевой агент виртуальной машины %s не активен.", d.name))
	case d.hang:
		// handled below, outside the lock
	case !slices.Contains(d.guestCommands(), cmd):
		// The platform knows the command, this guest's agent does not (QEMU's own words).
		e = errRule(txtf("Guest agent error: The command %s has not been found", "Ошибка гостевого агента: The command %s has not been found", cmd))
	case d.cmdErrors[cmd] != "":
		e = errRule(txtf("Guest agent error: %s", "Ошибка гостевого агента: %s", d.cmdErrors[cmd]))
	default:
		result, e = s.st.guestResult(d, cmd, fargs, now)
		if h, ok := d.hostile[cmd]; ok && e == nil {
			result = hostileResult(h, result)
		}
	}
	hang := ok && e == nil && d.hang
	s.mu.Unlock()
	if hang {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.stop:
		}
		writeError(w, errRule(txtf("guest agent timeout: command %s got no answer within %s", "тайм-аут гостевого агента: команда %s не получила ответа за %s", cmd, timeout)))
		return
	}
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{cmd: result})
}

// guestResult answers a command as QEMU's guest agent would (qga/qapi-schema.json).
func (st *state) guestResult(d *domain, cmd string, fargs map[string]any, now time.Time) (any, *apiError) {
	seed := d.agentSeed()
	switch cmd {
	case "guest-ping", "guest-fstrim", "guest-set-time", "guest-ssh-add-authorized-keys",
		"guest-ssh-remove-authorized-keys", "guest-set-user-password", "guest-file-flush",
		"guest-file-close", "guest-shutdown", "guest-suspend-ram", "guest-suspend-disk", "guest-suspend-hybrid":
		return map[string]any{}, nil
	case "guest-get-time":
		return now.Add(d.clockOffset).UnixNano(), nil
	case "guest-get-host-name":
		return map[string]any{"host-name": d.hostname()}, nil
	case "guest-get-osinfo":
		return d.osinfo(seed), nil
	case "guest-info":
		return d.guestInfo(), nil
	case "guest-get-fsinfo":
		return d.fsinfo(seed), nil
	case "guest-network-get-interfaces":
		return d.interfaces(seed), nil
	case "guest-get-diskstats":
		return d.diskstats(now), nil
	case "guest-get-cpustats":
		return d.cpustats(now), nil
	case "guest-get-load":
		return d.load(), nil
	}
	return d.otherGuestResult(cmd, fargs, now, seed)
}

// otherGuestResult answers the rest of the agent's schema: commands the exporter never sends,
// answered so that the simulator serves any client as the agent would.
func (d *domain) otherGuestResult(cmd string, fargs map[string]any, now time.Time, seed uint64) (any, *apiError) {
	switch cmd {
	case "guest-get-timezone":
		return map[string]any{"zone": "MSK", "offset": 10800}, nil
	case "guest-get-users":
		return []map[string]any{{"user": "admin", "login-time": float64(now.Add(-time.Hour).Unix())}}, nil
	case "guest-get-vcpus":
		out := make([]map[string]any, d.cpus)
		for i := range out {
			out[i] = map[string]any{"logical-id": i, "online": true, "can-offline": i > 0}
		}
		return out, nil
	case "guest-set-vcpus":
		return d.cpus, nil
	case "guest-fsfreeze-status":
		return "thawed", nil
	case "guest-fsfreeze-freeze", "guest-fsfreeze-freeze-list", "guest-fsfreeze-thaw":
		return len(d.fsinfo(seed)), nil
	case "guest-exec":
		return d.exec(fargs, seed)
	case "guest-exec-status":
		pid, ok := intArg(fargs["pid"])
		res, known := d.execs[pid]
		if !ok || !known {
			return nil, errField("fargs", "invalid", txt("Invalid parameter 'pid'.", "Недопустимый параметр 'pid'."))
		}
		return res, nil
	case "guest-ssh-get-authorized-keys":
		user, _ := fargs["username"].(string)
		if user == "" {
			user = "root"
		}
		keys := d.sshKeys[user]
		if keys == nil {
			keys = []string{}
		}
		return map[string]any{"keys": keys}, nil
	case "guest-sync", "guest-sync-delimited":
		return fargs["id"], nil
	case "guest-file-open":
		return 1000, nil
	case "guest-file-read":
		return map[string]any{"count": 0, "buf-b64": "", "eof": true}, nil
	case "guest-file-write":
		return map[string]any{"count": 0, "eof": false}, nil
	case "guest-file-seek":
		return map[string]any{"position": 0, "eof": false}, nil
	case "guest-get-memory-block-info":
		return map[string]any{"size": 134217728}, nil
	case "guest-get-memory-blocks", "guest-set-memory-blocks", "guest-get-devices":
		return []any{}, nil
	case "guest-get-disks":
		return []map[string]any{{"name": "/dev/vda", "partition": false, "dependencies": []string{}}}, nil
	}
	return map[string]any{}, nil
}

// osinfo is guest-get-osinfo's answer: Windows Server, or Ubuntu or Debian by seed.
func (d *domain) osinfo(seed uint64) map[string]any {
	if !d.linux {
		return map[string]any{"id": "mswindows", "name": "Microsoft Windows", "pretty-name": "Windows Server 2019 Standard",
			"version": "Microsoft Windows Server 2019", "version-id": "2019", "variant": "server", "variant-id": "server",
			"kernel-release": "17763", "kernel-version": "10.0", "machine": "x86_64"}
	}
	if seed%2 == 0 {
		return map[string]any{"id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 22.04.4 LTS",
			"version": "22.04.4 LTS (Jammy Jellyfish)", "version-id": "22.04", "kernel-release": "5.15.0-105-generic",
			"kernel-version": "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024", "machine": "x86_64"}
	}
	return map[string]any{"id": "debian", "name": "Debian GNU/Linux", "pretty-name": "Debian GNU/Linux 12 (bookworm)",
		"version": "12 (bookworm)", "version-id": "12", "kernel-release": "6.1.0-21-amd64",
		"kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.90-1 (2024-05-03)", "machine": "x86_64"}
}

// guestInfo is guest-info's answer: the agent's version and the commands it offers.
func (d *domain) guestInfo() map[string]any {
	offered := d.guestCommands()
	cmds := make([]map[string]any, 0, len(offered))
	for _, c := range offered {
		noReply := c == "guest-shutdown" || c == "guest-suspend-ram" || c == "guest-suspend-disk" || c == "guest-suspend-hybrid"
		cmds = append(cmds, map[string]any{"name": c, "enabled": true, "success-response": !noReply})
	}
	return map[string]any{"version": d.agentVersion(), "supported_commands": cmds}
}

func (d *domain) fsinfo(seed uint64) []map[string]any {
	gib := uint64(1 << 30)
	total := uint64(d.vdisks) * 40 * gib
	used := total * (20 + seed%70) / 100
	disk := func(dev string, slot int) []map[string]any {
		return []map[string]any{{"serial": fmt.Sprintf("sim-%x", seed%0xffffff), "bus-type": "virtio", "bus": 0, "unit": 0,
			"target": 0, "dev": dev, "pci-controller": map[string]any{"domain": 0, "bus": 0, "slot": slot, "function": 0}}}
	}
	if !d.linux {
		return []map[string]any{
			{"name": `\\?\Volume{6a1f-0001}\`, "mountpoint": `C:\`, "type": "NTFS", "disk": disk("", 6),
				"used-bytes": used, "total-bytes": total},
			// The System Reserved volume has no mount point and reports no sizes.
			{"name": `\\?\Volume{6a1f-0002}\`, "mountpoint": `System Reserved`, "type": "NTFS", "disk": disk("", 6)},
		}
	}
	return []map[string]any{
		{"name": "vda1", "mountpoint": "/", "type": "ext4", "disk": disk("/dev/vda1", 6),
			"used-bytes": used, "total-bytes": total},
		{"name": "vda15", "mountpoint": "/boot/efi", "type": "vfat", "disk": disk("/dev/vda15", 6),
			"used-bytes": 6 << 20, "total-bytes": 105 << 20},
		{"name": "tmpfs", "mountpoint": "/run", "type": "tmpfs", "disk": []any{},
			"used-bytes": 1 << 20, "total-bytes": uint64(d.memMiB) << 20 / 10},
		// squashfs snaps report no sizes: sizes are optional in the schema.
		{"name": "loop0", "mountpoint": "/snap/core20/2318", "type": "squashfs", "disk": []any{}},
	}
}

func (d *domain) interfaces(seed uint64) []map[string]any {
	mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", byte(seed>>16), byte(seed>>8), byte(seed))
	stats := func(k uint64) map[string]any {
		return map[string]any{"rx-bytes": k * 1000, "rx-packets": k, "rx-errs": 0, "rx-dropped": 0,
			"tx-bytes": k * 800, "tx-packets": k, "tx-errs": 0, "tx-dropped": 0}
	}
	addrs := []map[string]any{
		{"ip-address-type": "ipv4", "ip-address": d.ipv4, "prefix": 16},
		{"ip-address-type": "ipv6", "ip-address": fmt.Sprintf("fe80::5054:ff:fe%02x:%02x%02x", byte(seed>>16), byte(seed>>8), byte(seed)), "prefix": 64}}
	for _, a := range d.ipv6 {
		addrs = append(addrs, map[string]any{"ip-address-type": "ipv6", "ip-address": a, "prefix": 64})
	}
	return []map[string]any{
		{"name": "lo", "hardware-address": "00:00:00:00:00:00", "statistics": stats(100),
			"ip-addresses": []map[string]any{
				{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
				{"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}}},
		{"name": d.iface(), "hardware-address": mac, "statistics": stats(seed % 1000000), "ip-addresses": addrs},
	}
}

// uptimeMs is how long the guest has run since it was last powered on, in milliseconds: its
// counters start at 0 when it boots, so a power cycle resets them as a reboot does.
func (d *domain) uptimeMs(now time.Time) uint64 {
	return uint64(max(now.Sub(d.poweredAt).Milliseconds(), 0))
}

// diskstats answers guest-get-diskstats as a Linux guest's /proc/diskstats reads: each virtual
// disk (vda, vdb...), the partitions of the first (those fsinfo mounts) and a snap's loop
// device, with counters that grow at rates fixed per disk from the time the guest booted.
// Sectors are 512 bytes, ticks milliseconds.
func (d *domain) diskstats(now time.Time) []map[string]any {
	up := d.uptimeMs(now)
	disk := func(name string, major, minor int, busy bool) map[string]any {
		h := fnv.New64a()
		h.Write([]byte(d.id + "/" + name))
		k := h.Sum64()
		reads, writes := up*(1+k%20)/1000, up*(1+k>>8%30)/1000 // per second
		if !busy {
			reads, writes = up/60000, 0
		}
		readTicks, writeTicks := reads*(1+k>>16%3), writes*(2+k>>20%5)
		return map[string]any{"name": name, "major": major, "minor": minor, "stats": map[string]any{
			"read-sectors": reads * 8, "write-sectors": writes * 16, "discard-sectors": 0,
			"read-ios": reads, "write-ios": writes, "discard-ios": 0, "flush-ios": writes / 50,
			"read-merges": reads / 10, "write-merges": writes / 5, "discard-merges": 0,
			"read-ticks": readTicks, "write-ticks": writeTicks, "discard-ticks": 0, "flush-ticks": writes / 50,
			"ios-pgr": 0, "total-ticks": min(readTicks+writeTicks, up), "weight-ticks": readTicks + writeTicks,
		}}
	}
	out := []map[string]any{disk("loop0", 7, 0, false)}
	for i := range max(d.vdisks, 1) {
		name := "vd" + string(rune('a'+i))
		out = append(out, disk(name, 252, 16*i, true))
		if i == 0 {
			out = append(out, disk("vda1", 252, 1, true), disk("vda15", 252, 15, false))
		}
	}
	return out
}

// cpuShares are per mille of a busy CPU's time by mode (each a counter of its own: one computed
// as the rest of the others would not always grow).
var cpuShares = []struct {
	mode     string
	perMille uint64
}{{"user", 600}, {"nice", 20}, {"system", 250}, {"iowait", 50}, {"irq", 10}, {"softirq", 30}, {"steal", 40}}

// cpustats answers guest-get-cpustats: per CPU its time by mode since the guest booted, in
// USER_HZ ticks (100 per second), busy as the VM's cpu usage says.
func (d *domain) cpustats(now time.Time) []map[string]any {
	ticks := d.uptimeMs(now) / 10
	out := make([]map[string]any, max(d.cpus, 1))
	for i := range out {
		busy := uint64(d.cpuPct*10) + uint64(i)*7%50 // per mille, a little different per CPU
		busy = min(busy, 1000)
		c := map[string]any{"type": "linux", "cpu": i, "guest": 0, "guestnice": 0,
			"idle": ticks * (1000 - busy) / 1000}
		for _, s := range cpuShares {
			c[s.mode] = ticks * busy * s.perMille / 1_000_000
		}
		out[i] = c
	}
	return out
}

// load answers guest-get-load: load averages that follow the VM's cpu usage.
func (d *domain) load() map[string]any {
	l := float64(max(d.cpus, 1)) * d.cpuPct / 100
	return map[string]any{"load1": round2(l), "load5": round2(l * 0.9), "load15": round2(l * 0.8)}
}

// execHistory bounds the guest-exec results a VM keeps for guest-exec-status.
const execHistory = 64

// exec runs guest-exec as the spec's table shows: the result carries exitcode, out-data and
// exited at once (and pid, for guest-exec-status). It is deterministic: a program that exists
// echoes its arguments; a path that does not exist gives exit code 127 and err-data.
func (d *domain) exec(fargs map[string]any, seed uint64) (any, *apiError) {
	path, _ := fargs["path"].(string)
	var args []string
	if raw, ok := fargs["arg"]; ok && raw != nil {
		list, ok := raw.([]any)
		if !ok {
			return nil, errField("fargs", "invalid", txt("arg must be an array of strings.", "arg должен быть массивом строк."))
		}
		for _, a := range list {
			s, ok := a.(string)
			if !ok {
				return nil, errField("fargs", "invalid", txt("arg must be an array of strings.", "arg должен быть массивом строк."))
			}
			args = append(args, s)
		}
	}
	if d.execs == nil {
		d.execs = map[int]map[string]any{}
		d.execSeq = 1000 + int(seed%30000)
	}
	d.execSeq++
	pid := d.execSeq
	res := map[string]any{"pid": pid, "exited": true}
	if d.guestHasProgram(path) {
		res["exitcode"] = 0
		res["out-data"] = strings.Join(args, " ") + "\n"
	} else {
		res["exitcode"] = 127
		res["out-data"] = ""
		res["err-data"] = fmt.Sprintf("Failed to execute child process \u201c%s\u201d (No such file or directory)\n", path)
	}
	d.execs[pid] = res
	delete(d.execs, pid-execHistory)
	return res, nil
}

// guestHasProgram is the simulated guest's file system: programs in the usual directories.
func (d *domain) guestHasProgram(path string) bool {
	if d.linux {
		for _, dir := range []string{"/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/"} {
			if name, ok := strings.CutPrefix(path, dir); ok && name != "" && !strings.Contains(name, "/") {
				return true
			}
		}
		return false
	}
	p := strings.ToLower(strings.ReplaceAll(path, "/", `\`))
	return strings.HasPrefix(p, `c:\windows\system32\`) && strings.HasSuffix(p, ".exe") || p == "cmd.exe" || p == "powershell.exe"
}

func intArg(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(n))
	return i, err == nil
}
