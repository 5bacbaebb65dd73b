package veiltest

// Conformance of guest-exec through raw HTTP: the result is
// {exitcode, out-data, exited} at once, as the spec's table shows and vendor code reads it;
// the output echoes the arguments, a path that does not exist gives a non-zero exit code, and
// guest-exec-status answers the same result for the pid.

import (
	"encoding/json"
	"testing"
)

func TestGuestExecAnswersExitcodeOutDataExited(t *testing.T) {
	s, c := newSim(t, Options{VMs: 10, Templates: -1, RunningFraction: 1, AgentFraction: 1, LinuxFraction: 1})
	vm := s.DomainIDs()[0]
	run := func(cmd string, fargs map[string]any) (int, map[string]any, []byte) {
		st, b := c.do("POST", "/api/domains/"+vm+"/guest-command/", map[string]any{"qemu_cmd": cmd, "fargs": fargs})
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		res, _ := v[cmd].(map[string]any)
		return st, res, b
	}
	for _, tc := range []struct {
		name     string
		fargs    map[string]any
		exitcode float64
		out      string
	}{
		{"echo echoes its arguments", map[string]any{"path": "/bin/echo", "arg": []string{"hello", "world"}}, 0, "hello world\n"},
		{"any program echoes its arguments", map[string]any{"path": "/usr/bin/uptime", "arg": []string{"-p"}}, 0, "-p\n"},
		{"no arguments", map[string]any{"path": "/usr/bin/hostname"}, 0, "\n"},
		{"a path that does not exist", map[string]any{"path": "/opt/nothing/here", "arg": []string{"x"}}, 127, ""},
		{"no path", map[string]any{}, 127, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, res, b := run("guest-exec", tc.fargs)
			if st != 200 || res == nil {
				t.Fatalf("status %d: %s", st, b)
			}
			if res["exitcode"] != tc.exitcode || res["out-data"] != tc.out || res["exited"] != true {
				t.Fatalf("result %v, want exitcode %v out-data %q exited true", res, tc.exitcode, tc.out)
			}
			if tc.exitcode != 0 && res["err-data"] == "" {
				t.Fatalf("failure without err-data: %v", res)
			}
			// guest-exec-status of that pid tells the same.
			_, status, b := run("guest-exec-status", map[string]any{"pid": res["pid"]})
			if status == nil || status["exitcode"] != res["exitcode"] || status["out-data"] != res["out-data"] || status["exited"] != true {
				t.Fatalf("guest-exec-status %s, guest-exec %v", b, res)
			}
		})
	}
	t.Run("deterministic", func(t *testing.T) {
		_, a, _ := run("guest-exec", map[string]any{"path": "/bin/echo", "arg": []string{"same"}})
		_, b, _ := run("guest-exec", map[string]any{"path": "/bin/echo", "arg": []string{"same"}})
		if a["out-data"] != b["out-data"] || a["exitcode"] != b["exitcode"] || a["pid"] == b["pid"] {
			t.Fatalf("two runs: %v and %v", a, b)
		}
	})
	t.Run("status of an unknown pid is an error", func(t *testing.T) {
		st, _, b := run("guest-exec-status", map[string]any{"pid": 1})
		if st != 400 || errorOf(t, b)["msg_key"] != "fargs" {
			t.Fatalf("unknown pid: %d %s", st, b)
		}
	})
	t.Run("arguments must be strings", func(t *testing.T) {
		if st, _, b := run("guest-exec", map[string]any{"path": "/bin/echo", "arg": []any{1}}); st != 400 {
			t.Fatalf("numeric argument: %d %s", st, b)
		}
	})
}
