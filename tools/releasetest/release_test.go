//go:build releasetest

// TestRelease: two `make release` runs of one commit, then every artifact proven by using it.
package releasetest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dist is what the test checks: the release's files, its version and where its copy lives.
type dist struct {
	Dir, Version string
	Next         string // a second build of the commit with a higher version (amd64 only)
	NextVersion  string
}

func (d dist) path(name string) string { return filepath.Join(d.Dir, name) }

// TestRelease runs make release twice (the second signing with a throwaway key), compares
// them, and checks each artifact in a subtest.
func TestRelease(t *testing.T) {
	root := repoRoot(t)
	version := strings.TrimSpace(string(must(os.ReadFile(filepath.Join(root, "VERSION")))))
	tmp := t.TempDir()
	first := os.Getenv("RELEASE_TEST_DIST")
	if first == "" {
		first = reproducibleRelease(t, root, tmp)
	} else {
		t.Logf("checking the release in RELEASE_TEST_DIST=%s; its reproducibility is not checked", first)
	}
	next := filepath.Join(tmp, "next")
	nextVersion := bumpPatch(t, version)
	run(t, filepath.Join(root, "tools"), "go", "run", "./cmd/release", "-root", "..", "-out", next, "-version", nextVersion, "-arch", "amd64")
	d := dist{Dir: first, Version: version, Next: next, NextVersion: nextVersion}

	t.Run("tarball", func(t *testing.T) { checkTarballs(t, d) })
	t.Run("sbom", func(t *testing.T) { checkSBOMs(t, d) })
	t.Run("rpm", func(t *testing.T) { checkRPMs(t, d) })
	t.Run("image", func(t *testing.T) { checkImage(t, d) })
	t.Run("deb", func(t *testing.T) { checkDeb(t, d) })
}

// reproducibleRelease runs make release twice into tmp, the second signing with a throwaway
// key; both must give the same sha256sums.txt, sha256sum -c and gpg --verify must pass. It
// returns the first release's directory.
func reproducibleRelease(t *testing.T, root, tmp string) string {
	first, second := filepath.Join(tmp, "first"), filepath.Join(tmp, "second")
	// Both runs release the commit checked out now, whatever is committed meanwhile.
	rev := "RELEASE_REV=" + strings.TrimSpace(run(t, root, "git", "rev-parse", "HEAD"))

	began := time.Now()
	run(t, root, "make", "release", "DIST="+first, rev)
	t.Logf("make release took %v", time.Since(began).Round(time.Second))
	key := throwawayKey(t, filepath.Join(tmp, "gnupg"))
	run(t, root, "make", "release", "DIST="+second, "GPG_KEY="+key, rev)

	a := must(os.ReadFile(filepath.Join(first, "sha256sums.txt")))
	b := must(os.ReadFile(filepath.Join(second, "sha256sums.txt")))
	if !bytes.Equal(a, b) {
		t.Fatalf("two releases of one commit differ:\n%s\n---\n%s", a, b)
	}
	t.Logf("sha256sums.txt of both runs:\n%s", a)
	run(t, second, "sha256sum", "-c", "sha256sums.txt")
	run(t, second, "gpg", "--batch", "--verify", "sha256sums.txt.asc", "sha256sums.txt")
	tampered := filepath.Join(tmp, "tampered.txt")
	if err := os.WriteFile(tampered, append(bytes.Clone(b), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runErr(second, "gpg", "--batch", "--verify", "sha256sums.txt.asc", tampered); err == nil {
		t.Error("gpg --verify accepted the signature for other bytes")
	}

	return first
}

// throwawayKey makes a signing key without a passphrase in a new GNUPGHOME (set for the rest of
// the test) and returns its fingerprint.
func throwawayKey(t *testing.T, home string) string {
	t.Helper()
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GNUPGHOME", home)
	run(t, "", "gpg", "--batch", "--passphrase", "", "--quick-gen-key", "veil-exporter release test <release-test@invalid>", "ed25519", "sign", "1d")
	out := run(t, "", "gpg", "--batch", "--with-colons", "--list-secret-keys")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Split(l, ":"); len(f) > 9 && f[0] == "fpr" {
			return f[9]
		}
	}
	t.Fatalf("no key fingerprint in:\n%s", out)
	return ""
}

func bumpPatch(t *testing.T, v string) string {
	t.Helper()
	parts := strings.Split(v, ".")
	n, err := strconv.Atoi(parts[len(parts)-1])
	if len(parts) != 3 || err != nil {
		t.Fatalf("VERSION %q is not x.y.z", v)
	}
	parts[2] = strconv.Itoa(n + 1)
	return strings.Join(parts, ".")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// need finds a tool make release-test installs.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: make release-test installs it (Debian)", name)
	}
	return p
}
