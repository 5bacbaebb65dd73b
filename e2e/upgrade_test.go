//go:build upgrade

package e2e

// An upgrade from the previous release: its binary, built from the commit that release names,
// forwards events (the position in a file or in the NATS KV bucket, the stream's headers of its
// own making) and is killed mid-stream; this version's binary starts on the same state directory,
// bucket and stream while events keep coming. Every event of the journal must be on the stream
// once, in the journal's order, and nothing left backlogged. Run by make upgrade-test (part of
// make release-test): it builds an older commit, which is not make test's business.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// previousRelease is the commit the previous release was built from: $VEIL_UPGRADE_FROM (a
// commit or tag), else the newest tag v* before HEAD, else the commit that set VERSION to what
// it says now (the first build of this version: no release was tagged yet).
func previousRelease(t *testing.T, root string) string {
	t.Helper()
	if v := os.Getenv("VEIL_UPGRADE_FROM"); v != "" {
		return v
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	if tag := git("describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD^"); tag != "" {
		return tag
	}
	c := git("log", "-1", "--format=%H", "--", "VERSION")
	if c == "" {
		t.Fatal("no previous release: no tag v*, no commit of VERSION (is this a git clone?); set VEIL_UPGRADE_FROM")
	}
	return c
}

// buildRelease builds the exporter of commit rev from its own files (git archive) into dir.
func buildRelease(t *testing.T, root, rev, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	var tarball bytes.Buffer
	archive.Stdout = &tarball
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", rev, err)
	}
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "veil-exporter-previous")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/veil-exporter")
	build.Dir, build.Env = src, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release (%s): %v\n%s", rev, err, out)
	}
	return bin
}

func TestUpgradeFromThePreviousRelease(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	rev := previousRelease(t, root)
	previous := buildRelease(t, root, rev, t.TempDir())
	t.Logf("the previous release: %s", rev)
	bins := buildFaultBinaries(t)
	for _, store := range []string{"file", "nats_kv"} {
		t.Run(store, func(t *testing.T) {
			w := newDurabilityWorld(t, bins, false, false, 1)
			o := exporterOpts{}
			if store == "file" {
				o.posDir = filepath.Join(w.dir, "state")
			}
			w.addEvents(300)
			old := w.exporter("previous", o)
			old.bin = previous
			old.start()
			w.grows(0, "the previous release publishing")
			w.addEvents(200)
			w.grows(w.count(), "the previous release publishing what came while it ran")
			// Killed mid-stream, as an upgrade may find it (a package's restart is a SIGTERM, kinder).
			old.signal(syscall.SIGKILL)
			old.wait()
			w.addEvents(100) // while no exporter runs
			cur := w.exporter("current", o)
			cur.start()
			w.addEvents(100)
			w.feeder.stop()
			judgeData(t, w, cur, nil)
		})
	}
}
