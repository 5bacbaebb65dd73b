package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDieWithTestKillsWhatATestStartedWhenItIsKilled: a test process (this binary run again)
// starts a long sleep with DieWithTest and is then killed as a timeout or kill -9 ends a test
// binary, running no cleanup; the sleep goes with it.
func TestDieWithTestKillsWhatATestStartedWhenItIsKilled(t *testing.T) {
	if os.Getenv("VEIL_ORPHAN_HELPER") != "" {
		sleep := exec.Command("sleep", "600")
		DieWithTest(sleep)
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("pid", sleep.Process.Pid)
		select {} // until killed
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestDieWithTestKillsWhatATestStartedWhenItIsKilled$")
	parent.Env = append(os.Environ(), "VEIL_ORPHAN_HELPER=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = parent.Process.Kill()
		t.Fatalf("the helper printed no pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid")))
	if err != nil {
		_ = parent.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("the sleep %d is not running while its test runs", pid)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	Eventually(t, 10*time.Second, func() bool { return !alive(pid) }, "the sleep %d outlived its test", pid)
}

// alive says whether pid runs (a zombie left for its new parent to reap does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
