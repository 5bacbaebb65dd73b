package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestHelpExitsZero: the built binary's --help and -h print the usage with the standard flag
// names of a Prometheus exporter on stdout and exit 0.
func TestHelpExitsZero(t *testing.T) {
	bin := testutil.Build(t, "/cmd/veil-exporter")
	for _, arg := range []string{"--help", "-h"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, arg)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", arg, err, &stdout, &stderr)
			}
			for _, want := range []string{
				"--config.file=\"config.yaml\"", "--[no-]config.check", "--web.listen-address=:9867 ...",
				"--[no-]web.systemd-socket", "--web.config.file", "--web.telemetry-path=\"/metrics\"",
				"--web.max-requests=40", "--[no-]web.disable-exporter-metrics", "--log.level=info",
				"--log.format=logfmt", "--[no-]version", "-h, --[no-]help",
			} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("%s output lacks %s:\n%s", arg, want, &stdout)
				}
			}
			if regexp.MustCompile(`(?m)^\s+-[a-z]{2,}`).MatchString(stdout.String()) {
				t.Errorf("%s shows a single-dash long flag:\n%s", arg, &stdout)
			}
		})
	}
}

// stampedBinary builds veil-exporter stamped as the Makefile does.
func stampedBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "veil-exporter")
	const v = "github.com/prometheus/common/version."
	ldflags := "-X " + v + "Version=1.2.3-test -X " + v + "Revision=0123abc -X " + v + "Branch=feature/x" +
		" -X " + v + "BuildUser=tester@ci -X " + v + "BuildDate=20260102-03:04:05"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "github.com/veil-exporter/veil-exporter/cmd/veil-exporter").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestStampedBinary: what the linker stamps into prometheus/common/version shows in --version
// and in veil_exporter_build_info; two --web.listen-address both serve.
func TestStampedBinary(t *testing.T) {
	bin := stampedBinary(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	for _, want := range []string{
		"veil-exporter, version 1.2.3-test (branch: feature/x, revision: 0123abc)",
		"build user:       tester@ci", "build date:       20260102-03:04:05",
		"go version:       " + runtime.Version(), "platform:         " + runtime.GOOS + "/" + runtime.GOARCH,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version lacks %q:\n%s", want, out)
		}
	}

	cfgFile := simConfig(t)
	cmd := exec.Command(bin, "--config.file", cfgFile, "--web.listen-address", "127.0.0.1:0", "--web.listen-address=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The exporter-toolkit logs each listener it serves.
	addrc := make(chan string, 2)
	logs := &testutil.SyncBuffer{}
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg="Listening on" .*address=(\S+)`)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
	}()
	var addrs []string
	for len(addrs) < 2 {
		select {
		case a := <-addrc:
			addrs = append(addrs, a)
		case <-time.After(30 * time.Second):
			t.Fatalf("want two listeners, got %v; logs:\n%s", addrs, logs)
		}
	}
	if addrs[0] == addrs[1] {
		t.Fatalf("both listeners on %s", addrs[0])
	}
	buildInfo := regexp.MustCompile(`(?m)^veil_exporter_build_info\{branch="feature/x",goarch="` + runtime.GOARCH + `",goos="` + runtime.GOOS +
		`",goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="0123abc",tags="[^"]*",version="1\.2\.3-test"\} 1$`)
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !buildInfo.Match(body) {
			t.Errorf("%s/metrics = %d, build info:\n%s", a, resp.StatusCode, grepLines(string(body), "veil_exporter_build_info"))
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestExporterMetrics: by default /metrics holds the Go, process and promhttp metrics and the
// seven labels of veil_exporter_build_info; --web.disable-exporter-metrics leaves out the first
// three, not ours.
func TestExporterMetrics(t *testing.T) {
	cfgFile := simConfig(t)
	buildInfo := regexp.MustCompile(`(?m)^veil_exporter_build_info\{branch="[^"]*",goarch="` + runtime.GOARCH + `",goos="` + runtime.GOOS +
		`",goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]*",tags="[^"]*",version="[^"]+"\} 1$`)
	exporterMetric := regexp.MustCompile(`(?m)^(go|process|promhttp)_\w+`)
	tests := []struct {
		name     string
		args     []string
		exporter bool
	}{
		{"default", nil, true},
		{"disabled", []string{"--web.disable-exporter-metrics"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startDaemon(t, cfgFile, tt.args...)
			d.get(t, "/metrics") // so that promhttp_metric_handler_requests_total has counted one
			code, metrics := d.get(t, "/metrics")
			if code != 200 || !strings.Contains(metrics, "veil_config_last_reload_successful") || !buildInfo.MatchString(metrics) {
				t.Errorf("/metrics = %d, lacks our metrics or the seven build info labels:\n%s", code, grepLines(metrics, "build_info"))
			}
			got := exporterMetric.FindAllString(metrics, -1)
			if !tt.exporter && len(got) > 0 {
				t.Errorf("exporter metrics despite --web.disable-exporter-metrics: %v", got)
			}
			if tt.exporter {
				for _, want := range []string{`promhttp_metric_handler_requests_total{code="200"} 1`, "promhttp_metric_handler_requests_in_flight 1", "promhttp_metric_handler_errors_total", "go_goroutines", "process_start_time_seconds"} {
					if !strings.Contains(metrics, want) {
						t.Errorf("/metrics lacks %s", want)
					}
				}
			}
		})
	}
}

// TestMaxRequestsFlag: --web.max-requests is 40 unless given (the limit itself: the daemon's
// TestMaxRequests).
func TestMaxRequestsFlag(t *testing.T) {
	if f, err := parseFlags(nil, io.Discard); err != nil || f.handler.MaxRequests != 40 {
		t.Fatalf("default --web.max-requests = %+v, %v; want 40", f, err)
	}
	if f, err := parseFlags([]string{"--web.max-requests", "2"}, io.Discard); err != nil || f.handler.MaxRequests != 2 {
		t.Fatalf("--web.max-requests 2 parsed as %+v, %v", f, err)
	}
}

// simConfig writes the configuration of one controller, alpha, on a simulator that lives as long
// as the test, and returns its path.
func simConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sim := veiltest.New(veiltest.Options{Seed: 1, Token: testutil.SecretToken, VMs: 2})
	t.Cleanup(sim.Close)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(testutil.SecretToken), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "veil.yaml")
	testutil.WriteConfig(t, cfgFile, testutil.ControllerYAML("alpha", sim.URL, tok))
	return cfgFile
}

// TestWebFlags: --web.write-timeout is 15 s unless given (the deadline itself: the daemon's
// TestWriteDeadlineDropsStalledClient); /-/reload is off unless --web.enable-lifecycle (the
// endpoint itself: the daemon's TestLifecycleAndBrowserHeaders).
func TestWebFlags(t *testing.T) {
	f, err := parseFlags(nil, io.Discard)
	if err != nil || f.handler.WriteTimeout != 15*time.Second {
		t.Fatalf("default --web.write-timeout = %+v, %v; want 15s", f, err)
	}
	if f, err := parseFlags([]string{"--web.write-timeout", "1m"}, io.Discard); err != nil || f.handler.WriteTimeout != time.Minute {
		t.Fatalf("--web.write-timeout 1m parsed as %+v, %v", f, err)
	}
	if f.handler.EnableLifecycle {
		t.Error("--web.enable-lifecycle is on by default")
	}
	if f, err := parseFlags([]string{"--web.enable-lifecycle"}, io.Discard); err != nil || !f.handler.EnableLifecycle {
		t.Fatalf("--web.enable-lifecycle parsed as %+v, %v", f, err)
	}
}
