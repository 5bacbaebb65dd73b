// Command release writes dist/ (make release): tarballs, .deb and .rpm packages, the OCI image
// archive, SBOMs and sha256sums.txt for the commit checked out at -root (package release).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/veil-exporter/veil-exporter/tools/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	o := release.Options{Log: os.Stdout}
	var arches string
	var worktree, sumsOnly bool
	var revision string
	flag.StringVar(&revision, "rev", "HEAD", "the commit to release")
	flag.BoolVar(&worktree, "worktree", false, "build the work tree as it is instead of the files of -rev (not for a release)")
	flag.BoolVar(&sumsOnly, "sums-only", false, "only write sha256sums.txt (and its signature) over what -out holds")
	flag.StringVar(&o.Root, "root", "..", "the repository root")
	flag.StringVar(&o.Out, "out", "../dist", "the directory to write (emptied first)")
	flag.StringVar(&o.Version, "version", "", "the version (default: the VERSION file)")
	flag.StringVar(&o.Branch, "branch", "HEAD", "stamped as the build's branch")
	flag.StringVar(&o.BuildUser, "build-user", "veil-exporter-release", "stamped as the build's user")
	flag.StringVar(&arches, "arch", "amd64,arm64", "GOARCHes to release for linux")
	flag.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the image's CA bundle")
	flag.StringVar(&o.GPGKey, "gpg-key", "", "sign sha256sums.txt with this gpg key id")
	flag.Parse()
	o.Arches = strings.Split(arches, ",")
	ctx := context.Background()
	if sumsOnly {
		return release.Sums(ctx, o.Out, o.GPGKey)
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return err
	}
	o.Root = root
	if o.Version == "" {
		b, err := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil {
			return err
		}
		o.Version = strings.TrimSpace(string(b))
	}
	rev, err := git(root, "rev-parse", "--verify", revision+"^{commit}")
	if err != nil {
		return err
	}
	ct, err := git(root, "log", "-1", "--format=%ct", rev)
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return fmt.Errorf("commit time %q: %w", ct, err)
	}
	o.Revision, o.Date = rev, time.Unix(secs, 0).UTC()
	if !worktree {
		src, err := os.MkdirTemp("", "veil-release-src-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(src)
		if err := release.Checkout(ctx, root, rev, src); err != nil {
			return err
		}
		o.Root = src
	}
	return release.Run(ctx, o)
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
