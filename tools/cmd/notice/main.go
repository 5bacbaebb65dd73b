// Command notice writes NOTICE at the repository root (make notice): the licenses of the Go
// modules the veil-exporter binary links (package notice).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/veil-exporter/veil-exporter/tools/notice"
)

func main() {
	root := flag.String("root", "..", "the repository root (the daemon's module)")
	flag.Parse()
	b, err := notice.Generate(context.Background(), *root)
	if err == nil {
		err = os.WriteFile(filepath.Join(*root, "NOTICE"), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "notice:", err)
		os.Exit(1)
	}
}
