// Tests of the release's parts that need no build: the tarball bytes depend on their inputs
// only, the packaged unit follows deploy/systemd's, the image recipe is deploy/Dockerfile's.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../.."

// TestTarGzSameInputsSameBytes: two tarballs of the same entries are equal byte for byte, and
// every header carries the given time and owner 0, whatever the clock or the user.
func TestTarGzSameInputsSameBytes(t *testing.T) {
	mtime := time.Unix(1764547200, 0)
	entries := []entry{{Name: "d/", Mode: 0o755}, {Name: "d/f", Mode: 0o644, Data: []byte("x")}}
	a, err := tarGz(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tarGz(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two tarballs of the same entries differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has time %v, name %q; want none", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
	}
	c, err := tarGz(entries, mtime.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, c) {
		t.Error("a tarball of another time has the same bytes: the time is not in the headers")
	}
}

// TestPackagedUnitFollowsTheSourceUnit: the packaged unit runs /usr/bin/veil-exporter as the
// package's user with flags from /etc/default, and keeps every hardening line of the source.
func TestPackagedUnitFollowsTheSourceUnit(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "deploy/systemd/veil-exporter.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit, err := packagedUnit(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=/usr/bin/veil-exporter --config.file=/etc/veil-exporter/config.yaml $ARGS\n",
		"EnvironmentFile=-/etc/default/veil-exporter\n", "User=veil-exporter\n", "Group=veil-exporter\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the packaged unit has no %q", want)
		}
	}
	for _, gone := range []string{"DynamicUser", "LoadCredential", "/usr/local/"} {
		if strings.Contains(unit, gone) {
			t.Errorf("the packaged unit still has %q", gone)
		}
	}
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "Protect") || strings.HasPrefix(l, "Restrict") || strings.HasPrefix(l, "StateDirectory") {
			if !strings.Contains(unit, l+"\n") {
				t.Errorf("the packaged unit lost %q", l)
			}
		}
	}
	if _, err := packagedUnit(strings.Replace(string(src), "DynamicUser=yes", "DynamicUser=true", 1)); err == nil {
		t.Error("a source unit without an expected line was accepted")
	}
}

// TestImageRecipeIsTheDockerfile: deploy/Dockerfile parses into the recipe the image is made
// from, and the layer holds what its COPY lines name, the state directory owned by its user.
func TestImageRecipeIsTheDockerfile(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "deploy/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if r.User != "65532:65532" || !slices.Equal(r.Entrypoint, []string{"/usr/bin/veil-exporter"}) ||
		!slices.Equal(r.Exposed, []string{"9867/tcp"}) || !slices.Equal(r.Volumes, []string{"/var/lib/veil-exporter"}) {
		t.Fatalf("recipe %+v", r)
	}
	ctx := map[string][]byte{"ca-certificates.crt": []byte("ca"), "passwd": []byte("p"), "group": []byte("g"),
		"veil-exporter": []byte("bin"), "config.yaml": []byte("c"), "state": nil}
	entries, err := layerEntries(r, ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	for _, name := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group", "usr/bin/veil-exporter", "etc/veil-exporter/config.yaml", "var/lib/veil-exporter/", "var/lib/"} {
		if _, ok := got[name]; !ok {
			t.Errorf("the layer has no %s", name)
		}
	}
	if s := got["var/lib/veil-exporter/"]; s.UID != 65532 || s.GID != 65532 {
		t.Errorf("state directory owned by %d:%d, want 65532:65532", s.UID, s.GID)
	}
	if b := got["usr/bin/veil-exporter"]; b.Mode != 0o755 {
		t.Errorf("binary mode %o", b.Mode)
	}
	if _, err := parseDockerfile("FROM scratch\nRUN true\nENTRYPOINT [\"/x\"]\n"); err == nil {
		t.Error("a Dockerfile with RUN was accepted")
	}
}
