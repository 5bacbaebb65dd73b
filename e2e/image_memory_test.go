package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// imageMemoryLimit is below the peak the exporter reaches at 10,000 VMs with every format
// scraped, guest checks and events on, when nothing limits it (about 290 MiB resident).
const imageMemoryLimit = 200 << 20

// TestImageUnderMemoryLimit runs the image under `podman run --memory` below the exporter's
// unlimited peak, at 10,000 VMs with guest checks and events on, and scrapes all three formats
// through several refreshes: the exporter reads the cgroup's limit and sets the Go memory
// limit under it (said once in its log), every scrape is answered in full, and the container is
// never OOM-killed.
func TestImageUnderMemoryLimit(t *testing.T) {
	podman := needImageTool(t, "podman")
	unique := fmt.Sprintf("veil-e2e-mem-%d-%d", os.Getpid(), time.Now().UnixNano())
	image := buildImage(t, podman, unique, "e2e-mem")

	sim := veiltest.New(veiltest.Options{Seed: 17, Nodes: 20, Datapools: 10, VMs: 10000, InitialEvents: 500, EventRate: 5})
	defer sim.Close()
	webAddr, natsAddr := freeAddr(t), freeAddr(t)
	etc := writeMemConfig(t, sim, natsAddr)
	run := append([]string{"run", "--detach", "--name", unique, "--memory", strconv.Itoa(imageMemoryLimit)}, runcFlags(t)...)
	if _, err := podmanRun(podman, append(run, "--read-only", "--tmpfs", "/tmp", "--network", "host",
		"--volume", etc+":/etc/veil-exporter:ro",
		image, "--config.file=/etc/veil-exporter/config.yaml", "--web.listen-address="+webAddr)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = podmanRun(podman, "rm", "-f", "--time", "0", unique) })
	pid, err := podmanRun(podman, "inspect", "--format", "{{.State.Pid}}", unique)
	if err != nil {
		t.Fatal(err)
	}

	testutil.EventuallyNil(t, time.Minute, func() error {
		_, err := scrape("http://" + webAddr + "/-/healthy")
		return err
	}, "the exporter listening")

	// Scraped every second in each format (a scraper's pace, faster than Prometheus'), until the
	// inventory is exported in full and then through three more refreshes.
	accepts := []string{"text/plain;version=0.0.4", "application/openmetrics-text;version=1.0.0",
		"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"}
	domains := regexp.MustCompile(`(?m)^veil_domain_info\{`)
	var full time.Time
	scrapes, seen := 0, 0
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ; full.IsZero() || time.Since(full) < 15*time.Second; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the inventory was not exported in full within 3 minutes (%d scrapes answered, the last with %d domains)\n%s", scrapes, seen, podmanLogs(podman, unique))
		}
		for _, accept := range accepts {
			body, err := scrapeGzip("http://"+webAddr+"/metrics", accept)
			if err != nil {
				t.Fatalf("scrape %d (%s) after %d answered: %v\n%s", scrapes+1, accept, scrapes, err, podmanLogs(podman, unique))
			}
			scrapes++
			if strings.HasPrefix(accept, "text/plain") && full.IsZero() {
				if seen = len(domains.FindAllIndex(body, -1)); seen >= 10000 {
					full = time.Now()
				}
			}
		}
	}

	state, err := podmanRun(podman, "inspect", "--format", "{{.State.Status}} {{.State.OOMKilled}}", unique)
	if err != nil || state != "running false" {
		t.Errorf("container state %q (%v), want running and never OOM-killed", state, err)
	}
	logs := podmanLogs(podman, unique)
	set := regexp.MustCompile(`msg="Go memory limit set below the cgroup's[^"]*" cgroup_limit_bytes=(\d+) gomemlimit_bytes=(\d+)`).FindAllStringSubmatch(logs, -1)
	if len(set) != 1 || set[0][1] != strconv.Itoa(imageMemoryLimit) {
		t.Errorf("want one line setting the Go memory limit from a cgroup limit of %d, got %q\n%s", imageMemoryLimit, set, logs)
	}
	if status, err := os.ReadFile("/proc/" + pid + "/status"); err == nil {
		hwm := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB`).FindSubmatch(status)
		if hwm != nil {
			t.Logf("%d scrapes answered under a %d MiB limit; VmHWM %s kB", scrapes, imageMemoryLimit>>20, hwm[1])
		}
	}
}

// writeMemConfig writes the config and the token of TestImageUnderMemoryLimit's exporter into a
// directory of their own, and returns it.
func writeMemConfig(t *testing.T, sim *veiltest.Server, natsAddr string) string {
	t.Helper()
	etc := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`controllers:
  - name: mem
    url: %s
    token_file: /etc/veil-exporter/token
collect: {interval: 5s}
events: {poll_interval: 1s, start: earliest, checkpoint: {store: nats_kv}}
nats:
  url: nats://%s
  embedded: {enabled: true, listen: "%s", store_dir: /tmp/nats}
`, sim.URL, natsAddr, natsAddr)
	for name, body := range map[string]string{"config.yaml": cfg, "token": sim.Token + "\n"} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return etc
}

// scrapeGzip reads /metrics as a scraper does: one format asked, gzip accepted, 200 required.
func scrapeGzip(u, accept string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", "gzip")
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	var b bytes.Buffer
	_, err = io.Copy(&b, r)
	return b.Bytes(), err
}

// podmanLogs is the container's log, or why it could not be read.
func podmanLogs(podman, container string) string {
	out, err := exec.Command(podman, "logs", container).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("podman logs: %v\n%s", err, out)
	}
	return string(out)
}
