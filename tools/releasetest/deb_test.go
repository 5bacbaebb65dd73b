//go:build releasetest

// The .deb in a Debian container made offline from Debian's packages (mmdebstrap, then podman
// import; the rootfs cached between runs): installed with dpkg -i, its user and state directory,
// systemd-analyze verify of its unit, the daemon as the service user serving /metrics with the
// packaged config pointed at the simulator, an upgrade keeping the edited config, dpkg -r
// keeping it and dpkg --purge removing it.
package releasetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debianImage and its rootfs name the packages beyond minbase: systemd (systemd-analyze) and
// procps (the unit's /bin/kill), as on a Debian host with systemd.
const (
	debianImage  = "localhost/veil-release-test-debian:bookworm-systemd-procps"
	debianRootfs = "debian-bookworm-systemd-procps.tar"
)

// debianContainer starts a container of the cached Debian image (made first if missing) that
// lives until the test ends, on the host's network, and returns its name.
func debianContainer(t *testing.T) string {
	podman := need(t, "podman")
	if _, err := runErr("", podman, "image", "exists", debianImage); err != nil {
		cache := os.Getenv("RELEASE_TEST_CACHE")
		if cache == "" {
			cache = filepath.Join(t.TempDir(), "cache")
		}
		rootfs := filepath.Join(cache, debianRootfs)
		if _, err := os.Stat(rootfs); err != nil {
			if err := os.MkdirAll(cache, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"--variant=minbase", "--include=systemd,procps", "--format=tar", "bookworm", rootfs + ".part"}
			if _, err := os.Stat("/etc/apt/sources.list.d/debian.sources"); err == nil {
				args = append(args, "/etc/apt/sources.list.d/debian.sources")
			}
			began := time.Now()
			run(t, "", need(t, "mmdebstrap"), args...)
			if err := os.Rename(rootfs+".part", rootfs); err != nil {
				t.Fatal(err)
			}
			t.Logf("mmdebstrap made %s in %v", rootfs, time.Since(began).Round(time.Second))
		}
		run(t, "", podman, "import", rootfs, debianImage)
	}
	name := fmt.Sprintf("veil-release-test-deb-%d", time.Now().UnixNano())
	args := append([]string{"run", "--detach", "--name", name, "--network", "host"}, runcFlags(t)...)
	run(t, "", podman, append(args, debianImage, "sleep", "infinity")...)
	t.Cleanup(func() { _, _ = runErr("", podman, "rm", "-f", "--time", "0", name) })
	return name
}

// in runs a shell command in the container as root and returns its output.
func in(t *testing.T, container, script string) string {
	t.Helper()
	return run(t, "", "podman", "exec", "--env", "DEBIAN_FRONTEND=noninteractive", container, "sh", "-ec", script)
}

func checkDeb(t *testing.T, d dist) {
	c := debianContainer(t)
	deb := fmt.Sprintf("veil-exporter_%s_amd64.deb", d.Version)
	next := fmt.Sprintf("veil-exporter_%s_amd64.deb", d.NextVersion)
	run(t, "", "podman", "cp", d.path(deb), c+":/tmp/"+deb)
	run(t, "", "podman", "cp", filepath.Join(d.Next, next), c+":/tmp/"+next)

	in(t, c, "dpkg -i /tmp/"+deb)
	if u := in(t, c, "getent passwd veil-exporter"); !strings.Contains(u, ":/var/lib/veil-exporter:/usr/sbin/nologin") {
		t.Errorf("the service user: %q", u)
	}
	if st := strings.TrimSpace(in(t, c, "stat -c '%U %G %a' /var/lib/veil-exporter")); st != "veil-exporter veil-exporter 700" {
		t.Errorf("/var/lib/veil-exporter: %q, want veil-exporter veil-exporter 700", st)
	}
	if st := strings.TrimSpace(in(t, c, "stat -c '%U %G %a' /etc/veil-exporter /etc/veil-exporter/config.yaml")); st != "root veil-exporter 750\nroot veil-exporter 640" {
		t.Errorf("/etc/veil-exporter: %q", st)
	}
	if out, err := runErr("", "podman", "exec", c, "systemd-analyze", "verify", "/usr/lib/systemd/system/veil-exporter.service",
		"/usr/lib/systemd/system/veil-exporter.socket"); err != nil {
		t.Errorf("systemd-analyze verify: %v", err)
	} else if strings.TrimSpace(out) != "" {
		t.Logf("systemd-analyze verify: %s", out)
	}

	// The administrator's edits: the controller is the simulator, the token beside the config,
	// the listen address through ARGS.
	sim := startSimulator(t)
	addr := freeAddr(t)
	in(t, c, fmt.Sprintf(`sed -i 's|url: https://veil.example.com|url: %s|' /etc/veil-exporter/config.yaml
printf '%%s\n' %s >/etc/veil-exporter/prod.token
chgrp veil-exporter /etc/veil-exporter/prod.token && chmod 0640 /etc/veil-exporter/prod.token
printf 'ARGS="--web.listen-address=%s"\n' >>/etc/default/veil-exporter`, sim.URL, sim.Token, addr))
	edited := in(t, c, "cat /etc/veil-exporter/config.yaml /etc/default/veil-exporter")
	serveAsServiceUser(t, c, addr)

	in(t, c, "dpkg -i /tmp/"+next)
	if v := in(t, c, "dpkg-query -W -f '${Version}' veil-exporter"); v != d.NextVersion {
		t.Errorf("after the upgrade dpkg says version %q, want %s", v, d.NextVersion)
	}
	if v := in(t, c, "/usr/bin/veil-exporter --version"); !strings.Contains(v, "version "+d.NextVersion+" ") {
		t.Errorf("after the upgrade the binary says %q", v)
	}
	if after := in(t, c, "cat /etc/veil-exporter/config.yaml /etc/default/veil-exporter"); after != edited {
		t.Errorf("the upgrade changed the edited config")
	}
	if st := strings.TrimSpace(in(t, c, "stat -c '%U %a' /var/lib/veil-exporter")); st != "veil-exporter 700" {
		t.Errorf("after the upgrade /var/lib/veil-exporter is %q", st)
	}
	serveAsServiceUser(t, c, addr)

	in(t, c, "dpkg -r veil-exporter")
	if after := in(t, c, "cat /etc/veil-exporter/config.yaml /etc/default/veil-exporter"); after != edited {
		t.Errorf("dpkg -r changed the edited config")
	}
	in(t, c, "test ! -e /usr/bin/veil-exporter")
	in(t, c, "dpkg --purge veil-exporter")
	if left := in(t, c, "ls -d /etc/veil-exporter/config.yaml /etc/default/veil-exporter /var/lib/veil-exporter 2>/dev/null || true"); left != "" {
		t.Errorf("dpkg --purge left %s", left)
	}
}

// serveAsServiceUser runs the installed daemon as veil-exporter with the packaged config and
// ARGS of /etc/default/veil-exporter, as the unit does, until /metrics says veil_up 1; then
// stops it.
func serveAsServiceUser(t *testing.T, c, addr string) {
	t.Helper()
	run(t, "", "podman", "exec", "--detach", c, "sh", "-c",
		`. /etc/default/veil-exporter; echo $$ >/tmp/veil-exporter.pid
exec setpriv --reuid=veil-exporter --regid=veil-exporter --init-groups /usr/bin/veil-exporter --config.file=/etc/veil-exporter/config.yaml $ARGS >/tmp/veil-exporter.log 2>&1`)
	defer func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", in(t, c, "tail -30 /tmp/veil-exporter.log || true"))
		}
		in(t, c, `kill $(cat /tmp/veil-exporter.pid) 2>/dev/null || true; while kill -0 $(cat /tmp/veil-exporter.pid) 2>/dev/null; do sleep 0.1; done; rm -f /tmp/veil-exporter.pid`)
	}()
	alive := func() error {
		_, err := runErr("", "podman", "exec", c, "sh", "-c", "[ ! -e /tmp/veil-exporter.pid ] || kill -0 $(cat /tmp/veil-exporter.pid)")
		return err
	}
	waitMetrics(t, addr, alive)
	if u := strings.TrimSpace(in(t, c, `stat -c %U /proc/$(cat /tmp/veil-exporter.pid)`)); u != "veil-exporter" {
		t.Errorf("the daemon runs as %q", u)
	}
}
