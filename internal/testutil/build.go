// This file holds Build: the project's commands built once per test binary, for tests that run
// them as processes of their own (the exporter, the simulator, natsnode).

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const module = "github.com/veil-exporter/veil-exporter/"

var (
	buildMu  sync.Mutex
	builds   = map[string]*build{}
	binDir   string
	binDirOK sync.Once
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the command at pkg (a path inside the module, e.g. "cmd/veil-sim") once per test
// binary and returns the binary's path. Binaries go to a directory named after this process;
// directories of processes gone are removed on the way. Under the race detector the exporter is
// built with it too, so that the real-process suites race-check the daemon; a race it finds is
// written to its log, which RaceReport reads. $VEIL_BUILD_TAGS, if set, are the build tags of
// every command built (pprof: the exporter serves /debug/pprof on $VEIL_PPROF_ADDR).
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	binDirOK.Do(func() {
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), "veil-bin-*"))
		for _, d := range old {
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "veil-bin-"))
			if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) != nil {
				os.RemoveAll(d)
			}
		}
		binDir = filepath.Join(os.TempDir(), "veil-bin-"+strconv.Itoa(os.Getpid()))
	})
	buildMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &build{}
		builds[pkg] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		if b.err = os.MkdirAll(binDir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(binDir, filepath.Base(pkg))
		args := []string{"build", "-o", b.path}
		if Race && strings.Trim(pkg, "/") == "cmd/veil-exporter" {
			args = append(args, "-race")
		}
		if tags := os.Getenv("VEIL_BUILD_TAGS"); tags != "" {
			args = append(args, "-tags", tags) // e.g. pprof, to profile an exporter a benchmark runs
		}
		if out, err := exec.Command("go", append(args, module+strings.TrimPrefix(pkg, "/"))...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// RaceReport fails t when the log of a process Build made holds a race detector report.
func RaceReport(t testing.TB, name, logPath string) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		return // never started
	}
	if i := strings.Index(string(b), "WARNING: DATA RACE"); i >= 0 {
		end := min(len(b), i+6000)
		t.Errorf("%s: the race detector found a data race:\n%s", name, b[i:end])
	}
}
