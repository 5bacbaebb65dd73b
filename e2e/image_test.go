package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// TestImage builds the image users run (`make image`, deploy/Dockerfile) with podman and runs it
// as a user would: read-only root filesystem, non-root, the config mounted read-only, the state in
// a volume, host network on loopback, against the simulator. /metrics says veil_up 1, events
// reach the embedded NATS, SIGTERM ends the container within 10 s with the position in the
// volume, and the restarted container resumes from it: every journal event once on the stream.
func TestImage(t *testing.T) {
	podman := needImageTool(t, "podman")
	dir := t.TempDir()
	unique := fmt.Sprintf("veil-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	version := "e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	image := buildImage(t, podman, unique, version)
	if user, err := podmanRun(podman, "image", "inspect", "--format", "{{.Config.User}}", image); err != nil || user != "65532:65532" {
		t.Fatalf("image user %q (%v), want 65532:65532", user, err)
	}

	// The platform: a journal that holds still unless the test adds events.
	sim := veiltest.New(veiltest.Options{Seed: 11, Nodes: 2, Clusters: 1, Datapools: 1, VMs: 10, InitialEvents: 40})
	defer sim.Close()
	client, err := veil.New(veil.Config{URL: sim.URL, Token: sim.Token})
	if err != nil {
		t.Fatal(err)
	}

	// The config directory, mounted read-only; the container's user (65532) must read it.
	webAddr, natsAddr := freeAddr(t), freeAddr(t)
	etc := writeImageConfig(t, dir, sim, natsAddr)

	container, volume := unique, unique
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command(podman, "logs", "--tail", "60", container).CombinedOutput()
			t.Logf("--- container log (tail)\n%s", logs)
		}
		_, _ = podmanRun(podman, "rm", "-f", "--time", "0", container)
		_, _ = podmanRun(podman, "volume", "rm", "-f", volume)
	})
	run := append([]string{"run", "--detach", "--name", container}, runcFlags(t)...)
	if _, err := podmanRun(podman, append(run, "--read-only", "--network", "host",
		"--volume", etc+":/etc/veil-exporter:ro", "--volume", volume+":/var/lib/veil-exporter",
		image, "--config.file=/etc/veil-exporter/config.yaml", "--web.listen-address="+webAddr)...); err != nil {
		t.Fatal(err)
	}

	checkNonRoot(t, podman, container)
	waitStampedVersion(t, webAddr, version)

	// Events reach the embedded NATS, also those added while the container runs.
	sim.AddEvents(25, veiltest.EventSpec{})
	journal := imageJournal(t, client)
	js, nc := imageJetStream(t, natsAddr)
	imageCaughtUp(t, js, len(journal))
	nc.Close()

	// SIGTERM (podman stop sends the image's stop signal, SIGTERM, and kills after 10 s): the
	// exporter ends within 10 s, exit status 0, the position of the newest event in the volume.
	stopAndCheckPosition(t, podman, container, volume, journal)

	// Events while it is away; the restarted container publishes those, and only those.
	added := sim.AddEvents(15, veiltest.EventSpec{})
	if _, err := podmanRun(podman, "start", container); err != nil {
		t.Fatal(err)
	}
	journal = imageJournal(t, client)
	js, nc = imageJetStream(t, natsAddr)
	defer nc.Close()
	imageCaughtUp(t, js, len(journal))
	if v := classify(journal, readWholeStream(t, js, "VEIL_EVENTS")["img"]); !v.clean() {
		t.Errorf("after the restart, not every journal id once and in order: lost %v, duplicated %v, out of order %v, foreign %v",
			v.lost, v.duplicated, v.outOfOrder, v.foreign)
	}
	// The stream's deduplication would hide a start from the beginning; the counter does not.
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		m, err := scrape("http://" + webAddr + "/metrics")
		if err != nil {
			return err
		}
		if n := sumSamples(m, "veil_events_published_total"); n != float64(len(added)) {
			return fmt.Errorf("the restarted exporter published %v events, want the %d added while it was away", n, len(added))
		}
		return nil
	}, "the restarted exporter's published count")
}

// stopAndCheckPosition stops the container (podman stop sends SIGTERM, and kills after 10 s): the
// exporter ends by itself within those 10 s, exit status 0 (a kill would be 137), the position of
// the newest event in the volume.
func stopAndCheckPosition(t *testing.T, podman, container, volume string, journal []string) {
	t.Helper()
	began := time.Now()
	if _, err := podmanRun(podman, "stop", "--time", "10", container); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	t.Logf("%d events on the stream; the container ended %v after SIGTERM", len(journal), took.Round(time.Millisecond))
	if code, err := podmanRun(podman, "inspect", "--format", "{{.State.ExitCode}}", container); err != nil || code != "0" {
		t.Errorf("exit code %q (%v) after SIGTERM, want 0", code, err)
	}
	mnt, err := podmanRun(podman, "volume", "inspect", "--format", "{{.Mountpoint}}", volume)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(mnt, "img.position.json"))
	if err != nil {
		t.Fatalf("no position in the volume: %v", err)
	}
	// The newest event is at the position, or among the events of its last seconds it knows by
	// id (future: the settle time of docs/events.md).
	var pos struct {
		IDs    []string `json:"ids"`
		Future []struct {
			ID string `json:"id"`
		} `json:"future"`
	}
	if err := json.Unmarshal(b, &pos); err != nil {
		t.Fatalf("position %s: %v", b, err)
	}
	for _, f := range pos.Future {
		pos.IDs = append(pos.IDs, f.ID)
	}
	if last := journal[len(journal)-1]; !slices.Contains(pos.IDs, last) {
		t.Errorf("the saved position %s does not hold the newest event %s", b, last)
	}
}

// waitStampedVersion waits for veil_up 1 and the stamped version on /metrics.
func waitStampedVersion(t *testing.T, webAddr, version string) {
	t.Helper()
	upRE := regexp.MustCompile(`(?m)^veil_up\{[^}]*controller="img"[^}]*\} 1$`)
	buildRE := regexp.MustCompile(`(?m)^veil_exporter_build_info\{[^}]*version="` + regexp.QuoteMeta(version) + `"[^}]*\} 1$`)
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		m, err := scrape("http://" + webAddr + "/metrics")
		if err != nil {
			return err
		}
		if !upRE.Match(m) {
			return fmt.Errorf("no veil_up{controller=\"img\"} 1")
		}
		if !buildRE.Match(m) {
			return fmt.Errorf("no veil_exporter_build_info with version %q", version)
		}
		return nil
	}, "veil_up 1 and the stamped version on /metrics")
}

// checkNonRoot: the container's process runs as 65532 (read on the host, in /proc).
func checkNonRoot(t *testing.T, podman, container string) {
	t.Helper()
	pid, err := podmanRun(podman, "inspect", "--format", "{{.State.Pid}}", container)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`).Match(status) {
		t.Errorf("the container's process is not 65532:\n%s", status)
	}
}

// writeImageConfig writes the exporter's config and token into dir/etc, readable by the
// container's user, and returns that directory.
func writeImageConfig(t *testing.T, dir string, sim *veiltest.Server, natsAddr string) string {
	t.Helper()
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`controllers:
  - name: img
    url: %s
    token_file: /etc/veil-exporter/token
collect: {interval: 1s}
guest: {enabled: false}
events:
  poll_interval: 200ms
  start: earliest
  checkpoint: {store: file, dir: /var/lib/veil-exporter}
nats:
  url: nats://%s
  embedded: {enabled: true, listen: %s, store_dir: /var/lib/veil-exporter/nats}
`, sim.URL, natsAddr, natsAddr)
	for name, data := range map[string]string{"config.yaml": cfg, "token": sim.Token + "\n"} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return etc
}

// buildImage builds the image as a user does (make image) under the name unique, the version
// stamped, and removes it when the test ends.
func buildImage(t *testing.T, podman, unique, version string) string {
	t.Helper()
	needImageTool(t, "runc")
	makeBin := needImageTool(t, "make")
	image := "localhost/" + unique + ":latest"
	build := exec.Command(makeBin, "-C", repoRoot(t), "image", "IMAGE="+image, "IMAGE_DIR="+filepath.Join(t.TempDir(), "context"),
		"CONTAINER_ENGINE="+podman, "VERSION="+version)
	out, err := build.CombinedOutput()
	t.Cleanup(func() { _, _ = podmanRun(podman, "rmi", "-f", image) })
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return image
}

// runcFlags are podman run's flags for our test machines, where crun refuses the cgroup layout:
// the container runs with runc, and runc sets every rlimit it is given and may not raise one
// above the hard limit podman runs under, so the limits are given explicitly: open files as
// this process may, 4096 processes.
func runcFlags(t *testing.T) []string {
	t.Helper()
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	nofileMax := min(nofile.Max, 65536)
	return []string{"--runtime", "runc", fmt.Sprintf("--ulimit=nofile=%d:%d", nofileMax, nofileMax), "--ulimit=nproc=4096:4096"}
}

// needImageTool is need with the image test's packages in its message.
func needImageTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install Debian's podman and runc (make test-deps does)", name)
	}
	return p
}

// podmanRun runs podman with a deadline and returns its trimmed standard output.
func podmanRun(podman string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, podman, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// scrape reads a page that must answer 200.
func scrape(u string) ([]byte, error) {
	code, b, err := httpGet(u)
	if err == nil && code != 200 {
		err = fmt.Errorf("GET %s: status %d", u, code)
	}
	return b, err
}

// imageJournal lists the simulator's event ids oldest first.
func imageJournal(t *testing.T, client *veil.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for off := 0; ; off += 100 {
		p, err := client.EventsPage(ctx, off, 100, "created")
		if err != nil {
			t.Fatalf("reading the simulator's journal: %v", err)
		}
		for _, e := range p.Results {
			ids = append(ids, e.ID)
		}
		if len(p.Results) < 100 {
			return ids
		}
	}
}

// imageJetStream connects to the container's embedded NATS server once it accepts connections.
func imageJetStream(t *testing.T, addr string) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	var nc *nats.Conn
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		var err error
		nc, err = nats.Connect("nats://"+addr, nats.Timeout(2*time.Second))
		return err
	}, "a connection to the embedded NATS at %s", addr)
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return js, nc
}

// imageCaughtUp waits until the stream holds n messages (and no more).
func imageCaughtUp(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "VEIL_EVENTS")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if got := int(info.State.Msgs); got != n {
			return fmt.Errorf("%d messages on the stream, the journal holds %d", got, n)
		}
		return nil
	}, "the stream to hold the journal")
}

// sumSamples adds the values of every sample of the metric family name.
func sumSamples(exposition []byte, name string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
