//go:build releasetest

// What the release tests share: commands with their output in the failure, the simulator as a
// process, the exporter's /metrics awaited by condition.
package releasetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository (the daemon's module), from tools/releasetest.
func repoRoot(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command in dir (the test's working directory if empty) and returns its standard
// output; a failure ends the test with both outputs.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(dir string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, tail(stdout.String()), tail(stderr.String()))
	}
	return stdout.String(), nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// simulator is veil-sim (built from the work tree) running on loopback until the test ends.
type simulator struct{ URL, Token string }

func startSimulator(t *testing.T) simulator {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "veil-sim")
	run(t, repoRoot(t), "go", "build", "-o", bin, "./cmd/veil-sim")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--token", "release-test", "--vms", "5", "--event-rate", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "veil-sim listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return simulator{URL: u, Token: "release-test"}
		}
	}
	t.Fatal("veil-sim ended without saying where it listens")
	return simulator{}
}

// exporterConfig is a config for the simulator: inventory only (no guests, no NATS).
func exporterConfig(sim simulator, tokenFile string) string {
	return fmt.Sprintf(`controllers:
  - name: rel
    url: %s
    token_file: %s
collect: {interval: 1s}
guest: {enabled: false}
events: {enabled: false}
`, sim.URL, tokenFile)
}

var upRE = regexp.MustCompile(`(?m)^veil_up\{[^}]*\} 1$`)

// waitMetrics waits (up to a minute) for http://addr/metrics to answer with veil_up 1 and
// returns the page.
func waitMetrics(t *testing.T, addr string, alive func() error) []byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		if alive != nil {
			if err := alive(); err != nil {
				t.Fatalf("the exporter ended: %v", err)
			}
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && upRE.Match(b) {
				return b
			}
			last = fmt.Errorf("status %d, veil_up 1: %v", resp.StatusCode, upRE.Match(b))
		} else {
			last = err
		}
		time.Sleep(200 * time.Millisecond) // polling interval of a condition, not a wait for one
	}
	t.Fatalf("no veil_up 1 on http://%s/metrics within a minute: %v", addr, last)
	return nil
}

// writeFile writes data to path with mode, failing the test on error.
func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}
