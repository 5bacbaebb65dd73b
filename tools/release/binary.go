// The release binaries: built from the repository root with CGO off and -trimpath, stamped
// through prometheus/common/version with values that depend on the commit only (no user, host
// or clock), so two builds of one commit are the same bytes.
package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const versionPkg = "github.com/prometheus/common/version"

// buildBinary builds ./cmd/veil-exporter for linux/arch into dir and returns its path.
func buildBinary(ctx context.Context, o Options, arch, dir string) (string, error) {
	out := filepath.Join(dir, "veil-exporter")
	ldflags := strings.Join([]string{
		"-s", "-w", "-buildid=",
		"-X", versionPkg + ".Version=" + o.Version,
		"-X", versionPkg + ".Revision=" + o.Revision,
		"-X", versionPkg + ".Branch=" + o.Branch,
		"-X", versionPkg + ".BuildUser=" + o.BuildUser,
		"-X", versionPkg + ".BuildDate=" + o.Date.UTC().Format("20060102-15:04:05"),
	}, " ")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-mod=readonly",
		"-ldflags", ldflags, "-o", out, "./cmd/veil-exporter")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build linux/%s: %v\n%s", arch, err, stderr.Bytes())
	}
	return out, nil
}
