// Package notice writes NOTICE: the license texts of the Go modules that the veil-exporter binary
// links on every release target, taken from the module cache, and Go's own for the standard
// library. The module list is what `go list -deps` resolves for the binary's packages, which is
// what `go version -m` shows for a binary built from them.
package notice

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Targets are the GOARCHes of the release (GOOS linux, CGO off); their module sets are united.
var Targets = []string{"amd64", "arm64"}

// Module is one linked module and its directory in the module cache.
type Module struct {
	Path, Version, Dir string
}

// Linked lists the modules other than the main one that ./cmd/veil-exporter of the module at
// root links for any of Targets, sorted by path.
func Linked(ctx context.Context, root string) ([]Module, error) {
	seen := map[string]Module{}
	for _, arch := range Targets {
		cmd := exec.CommandContext(ctx, "go", "list", "-mod=readonly", "-deps",
			"-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Version}}\t{{.Dir}}{{end}}{{end}}", "./cmd/veil-exporter")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list for linux/%s: %v\n%s", arch, err, stderr.Bytes())
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Split(strings.TrimSpace(line), "\t")
			if len(f) != 3 {
				continue
			}
			if f[2] == "" {
				return nil, fmt.Errorf("module %s@%s is not in the module cache: run go mod download", f[0], f[1])
			}
			seen[f[0]] = Module{Path: f[0], Version: f[1], Dir: f[2]}
		}
	}
	mods := make([]Module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Path, b.Path) })
	return mods, nil
}

// licenseFile tells the files of a module's root that carry its license terms or notices.
func licenseFile(name string) bool {
	n := strings.ToUpper(name)
	for _, p := range []string{"LICENSE", "LICENCE", "COPYING", "NOTICE", "PATENTS"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// Render writes NOTICE for mods, with Go's license (goroot/LICENSE) for the standard library.
// A module without a license file is an error: it could not be redistributed.
func Render(w io.Writer, goroot string, mods []Module) error {
	fmt.Fprint(w, `veil-exporter
Copyright 2026 The veil-exporter Authors

This product is licensed under the Apache License 2.0 (LICENSE). The veil-exporter binary
includes the Go standard library and the Go modules listed below, each under its own license,
whose text follows. This file is generated (make notice) from the modules the binary links.

`)
	sections := append([]Module{{Path: "Go standard library", Dir: goroot}}, mods...)
	for _, m := range sections {
		entries, err := os.ReadDir(m.Dir)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		var found bool
		for _, e := range entries {
			if e.IsDir() || !licenseFile(e.Name()) {
				continue
			}
			text, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
			if err != nil {
				return err
			}
			if !found {
				fmt.Fprintf(w, "%s\n%s %s\n", strings.Repeat("=", 100), m.Path, m.Version)
			}
			found = true
			fmt.Fprintf(w, "%s\n-- %s\n\n%s\n", strings.Repeat("-", 100), e.Name(), strings.TrimRight(string(text), "\n\t "))
		}
		if !found {
			return fmt.Errorf("%s@%s has no license file in %s", m.Path, m.Version, m.Dir)
		}
	}
	return nil
}

// Generate renders NOTICE for the module at root.
func Generate(ctx context.Context, root string) ([]byte, error) {
	mods, err := Linked(ctx, root)
	if err != nil {
		return nil, err
	}
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	var b bytes.Buffer
	if err := Render(&b, strings.TrimSpace(string(goroot)), mods); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
