//go:build releasetest

// The tarball (exact file list, --version, /metrics against the simulator, promtool), the
// SBOMs (every module go version -m shows) and the .rpm's metadata (rpm -qp).
package releasetest

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var arches = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkTarballs(t *testing.T, d dist) {
	for arch, machine := range arches {
		base := fmt.Sprintf("veil-exporter-%s.linux-%s", d.Version, arch)
		dir := t.TempDir()
		names := untar(t, d.path(base+".tar.gz"), dir)
		want := []string{base + "/", base + "/veil-exporter", base + "/LICENSE", base + "/NOTICE", base + "/config.example.yaml",
			base + "/systemd/", base + "/systemd/veil-exporter.service", base + "/systemd/veil-exporter.socket", base + "/systemd/veil-exporter-ha.conf"}
		if !slices.Equal(names, want) {
			t.Errorf("%s holds\n%s\nwant\n%s", base, strings.Join(names, "\n"), strings.Join(want, "\n"))
		}
		bin := filepath.Join(dir, base, "veil-exporter")
		checkELF(t, bin, machine)
		if arch != "amd64" {
			continue
		}
		out := run(t, "", bin, "--version")
		if !strings.HasPrefix(out, "veil-exporter, version "+d.Version+" ") {
			t.Errorf("--version says %q, want version %s", out, d.Version)
		}
		serveFromTarball(t, bin)
	}
}

// serveFromTarball runs the tarball's binary against the simulator and checks /metrics with
// promtool.
func serveFromTarball(t *testing.T, bin string) {
	sim := startSimulator(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "token"), sim.Token+"\n", 0o600)
	writeFile(t, filepath.Join(dir, "config.yaml"), exporterConfig(sim, filepath.Join(dir, "token")), 0o644)
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "config.yaml"), "--web.listen-address="+addr)
	cmd.Stderr = &strings.Builder{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	alive := func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("%v: %s", err, cmd.Stderr)
		default:
			return nil
		}
	}
	page := waitMetrics(t, addr, alive)
	check := exec.Command(need(t, "promtool"), "check", "metrics")
	check.Stdin = strings.NewReader(string(page))
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// untar extracts a .tar.gz into dir and returns its member names in order.
func untar(t *testing.T, path, dir string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, p, string(must(io.ReadAll(tr))), os.FileMode(h.Mode))
	}
}

// checkELF: a static executable for machine.
func checkELF(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is an ELF for %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (CGO on?)", path)
		}
	}
}

// checkSBOMs: each SBOM lists every module go version -m shows for its tarball's binary.
func checkSBOMs(t *testing.T, d dist) {
	for arch := range arches {
		base := fmt.Sprintf("veil-exporter-%s.linux-%s", d.Version, arch)
		dir := t.TempDir()
		untar(t, d.path(base+".tar.gz"), dir)
		mods := goVersionModules(t, filepath.Join(dir, base, "veil-exporter"))
		var bom struct {
			BOMFormat  string `json:"bomFormat"`
			Components []struct {
				Name, Version, Purl string
			} `json:"components"`
		}
		if err := json.Unmarshal(must(os.ReadFile(d.path(base+".cdx.json"))), &bom); err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, c := range bom.Components {
			purl, _, _ := strings.Cut(c.Purl, "?")
			listed[purl] = true
		}
		if bom.BOMFormat != "CycloneDX" || len(mods) < 20 {
			t.Fatalf("%s: format %q, %d modules from go version -m", base, bom.BOMFormat, len(mods))
		}
		for _, m := range mods {
			if !listed["pkg:golang/"+m] {
				t.Errorf("%s.cdx.json does not list %s", base, m)
			}
		}
		t.Logf("%s.cdx.json lists the %d modules of go version -m", base, len(mods))
	}
}

// goVersionModules is path@version of every dep line of go version -m.
func goVersionModules(t *testing.T, bin string) []string {
	t.Helper()
	var mods []string
	for _, l := range strings.Split(run(t, "", "go", "version", "-m", bin), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "dep" {
			mods = append(mods, f[1]+"@"+f[2])
		}
	}
	return mods
}

// checkRPMs: the file list, the config files, the scripts and the dependencies rpm reads.
func checkRPMs(t *testing.T, d dist) {
	rpm := need(t, "rpm")
	for arch, rpmArch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		p := d.path(fmt.Sprintf("veil-exporter-%s-1.%s.rpm", d.Version, rpmArch))
		files := strings.Fields(run(t, "", rpm, "-qpl", p))
		for _, want := range []string{"/usr/bin/veil-exporter", "/usr/lib/systemd/system/veil-exporter.service",
			"/usr/lib/systemd/system/veil-exporter.socket", "/etc/veil-exporter/config.yaml", "/etc/default/veil-exporter",
			"/var/lib/veil-exporter", "/usr/share/veil-exporter/rules/veil-exporter.rules.yml",
			"/usr/share/veil-exporter/dashboards/overview.json", "/usr/share/veil-exporter/nats/stream.json"} {
			if !slices.Contains(files, want) {
				t.Errorf("%s rpm has no %s", arch, want)
			}
		}
		if cfg := strings.Fields(run(t, "", rpm, "-qpc", p)); !slices.Equal(cfg, []string{"/etc/default/veil-exporter", "/etc/veil-exporter/config.yaml"}) {
			t.Errorf("%s rpm config files %v", arch, cfg)
		}
		if state := run(t, "", rpm, "-qp", "--qf", "[%{FILENAMES} %{FILEUSERNAME} %{FILEMODES:perms}\n]", p); !strings.Contains(state, "/var/lib/veil-exporter veil-exporter drwx------\n") {
			t.Errorf("%s rpm: /var/lib/veil-exporter not the service user's 0700:\n%s", arch, state)
		}
		scripts := run(t, "", rpm, "-qp", "--scripts", p)
		for _, want := range []string{"preinstall scriptlet", "useradd --system", "postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"} {
			if !strings.Contains(scripts, want) {
				t.Errorf("%s rpm scripts lack %q", arch, want)
			}
		}
		if got := run(t, "", rpm, "-qp", "--qf", "%{ARCH} %{VERSION}-%{RELEASE} %{LICENSE}", p); got != rpmArch+" "+d.Version+"-1 Apache-2.0" {
			t.Errorf("%s rpm says %q", arch, got)
		}
		reqs := run(t, "", rpm, "-qpR", p)
		for _, want := range []string{"/bin/sh", "/usr/sbin/useradd", "/usr/sbin/groupadd"} {
			if !strings.Contains(reqs, want+"\n") {
				t.Errorf("%s rpm does not require %s for its scripts:\n%s", arch, want, reqs)
			}
		}
		t.Logf("%s rpm requires:\n%s", arch, reqs)
	}
}
