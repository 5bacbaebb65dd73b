// Integrity: sha256sums.txt over every file of dist/ (sha256sum's format, names sorted), and its
// detached armored signature by gpg when a key is given.
package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const sumsName = "sha256sums.txt"

// writeSums writes dir/sha256sums.txt over the other files of dir.
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), sumsName) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dir, sumsName), b.Bytes(), 0o644)
}

// signSums writes dir/sha256sums.txt.asc, signed by key (a gpg key id) from gpg's default home
// (GNUPGHOME).
func signSums(ctx context.Context, dir, key string) error {
	cmd := exec.CommandContext(ctx, "gpg", "--batch", "--yes", "--local-user", key, "--armor", "--detach-sign",
		"--output", filepath.Join(dir, sumsName+".asc"), filepath.Join(dir, sumsName))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gpg --detach-sign with key %s: %v\n%s", key, err, out)
	}
	return nil
}
