//go:build releasetest

// The OCI archive: its index lists amd64 and arm64, the arm64 image's binary is an aarch64
// ELF, and the amd64 image loaded into podman runs read-only as non-root against the simulator.
package releasetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

type ociDesc struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		Architecture, OS, Variant string
	} `json:"platform"`
	Annotations map[string]string `json:"annotations"`
}

type ociIndex struct {
	Manifests []ociDesc `json:"manifests"`
}

type ociManifest struct {
	Config ociDesc   `json:"config"`
	Layers []ociDesc `json:"layers"`
}

func checkImage(t *testing.T, d dist) {
	archive := d.path(fmt.Sprintf("veil-exporter-%s.oci.tar", d.Version))
	files := readTar(t, archive)
	var top, index ociIndex
	unmarshal(t, files["index.json"], &top)
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "veil-exporter:"+d.Version {
		t.Fatalf("index.json: %+v", top)
	}
	unmarshal(t, blob(t, files, top.Manifests[0].Digest), &index)
	var platforms []string
	for _, m := range index.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		var man ociManifest
		unmarshal(t, blob(t, files, m.Digest), &man)
		var cfg struct {
			Architecture string `json:"architecture"`
			Config       struct {
				User         string
				Entrypoint   []string
				ExposedPorts map[string]struct{}
				Labels       map[string]string
			} `json:"config"`
		}
		unmarshal(t, blob(t, files, man.Config.Digest), &cfg)
		if cfg.Architecture != m.Platform.Architecture || cfg.Config.User != "65532:65532" ||
			!slices.Equal(cfg.Config.Entrypoint, []string{"/usr/bin/veil-exporter"}) || cfg.Config.ExposedPorts["9867/tcp"] != struct{}{} ||
			cfg.Config.Labels["org.opencontainers.image.version"] != d.Version {
			t.Errorf("%s image config: %+v", m.Platform.Architecture, cfg)
		}
		bin := layerFile(t, blob(t, files, man.Layers[0].Digest), "usr/bin/veil-exporter")
		p := filepath.Join(t.TempDir(), "veil-exporter")
		writeFile(t, p, string(bin), 0o755)
		checkELF(t, p, arches[m.Platform.Architecture])
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the image index lists %v, want linux/amd64 and linux/arm64", platforms)
	}
	runImage(t, archive, d.Version)
}

// runImage loads the archive into podman (the host's architecture, amd64) and runs it as a
// user would: read-only, the config mounted read-only, against the simulator on loopback.
func runImage(t *testing.T, archive, version string) {
	podman := need(t, "podman")
	image := "localhost/veil-exporter:" + version
	_, _ = runErr("", podman, "rmi", "-f", image)
	out := run(t, "", podman, "load", "-i", archive)
	t.Cleanup(func() { _, _ = runErr("", podman, "rmi", "-f", image) })
	if !strings.Contains(out, image) {
		t.Fatalf("podman load: %s", out)
	}
	if arch := strings.TrimSpace(run(t, "", podman, "image", "inspect", "--format", "{{.Architecture}} {{.Config.User}}", image)); arch != "amd64 65532:65532" {
		t.Errorf("loaded image: %q, want amd64 65532:65532", arch)
	}
	sim := startSimulator(t)
	etc := t.TempDir()
	if err := os.Chmod(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(etc, "token"), sim.Token+"\n", 0o644)
	writeFile(t, filepath.Join(etc, "config.yaml"), exporterConfig(sim, "/etc/veil-exporter/token"), 0o644)
	addr := freeAddr(t)
	name := fmt.Sprintf("veil-release-test-%d", time.Now().UnixNano())
	args := append([]string{"run", "--detach", "--name", name}, runcFlags(t)...)
	args = append(args, "--read-only", "--network", "host", "--volume", etc+":/etc/veil-exporter:ro",
		image, "--config.file=/etc/veil-exporter/config.yaml", "--web.listen-address="+addr)
	run(t, "", podman, args...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := runErr("", podman, "logs", "--tail", "40", name)
			t.Logf("container log:\n%s", logs)
		}
		_, _ = runErr("", podman, "rm", "-f", "--time", "0", name)
	})
	waitMetrics(t, addr, nil)
	pid := strings.TrimSpace(run(t, "", podman, "inspect", "--format", "{{.State.Pid}}", name))
	status := must(os.ReadFile("/proc/" + pid + "/status"))
	if !regexp.MustCompile(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`).Match(status) {
		t.Errorf("the container's process is not 65532:\n%s", status)
	}
	if ro := run(t, "", podman, "inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name); strings.TrimSpace(ro) != "true" {
		t.Errorf("root filesystem read-only: %s", ro)
	}
}

// runcFlags are podman run's flags for machines where crun refuses the cgroup layout (as
// e2e/image_test.go): runc, with rlimits it may set.
func runcFlags(t *testing.T) []string {
	t.Helper()
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	n := min(nofile.Max, 65536)
	return []string{"--runtime", "runc", fmt.Sprintf("--ulimit=nofile=%d:%d", n, n), "--ulimit=nproc=4096:4096"}
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tarFiles(t, f)
}

func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			out[h.Name] = must(io.ReadAll(tr))
		}
	}
}

func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("the archive has no blob %s", digest)
	}
	return b
}

func layerFile(t *testing.T, layer []byte, name string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := tarFiles(t, zr)[name]
	if !ok {
		t.Fatalf("the layer has no %s", name)
	}
	return b
}

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}
