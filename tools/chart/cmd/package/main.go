// Command package writes the Helm chart's archive, <out>/veil-exporter-<version>.tgz, the same
// bytes on every run of one commit: every entry is dated SOURCE_DATE_EPOCH (or -mtime), which
// `make chart` sets to the time of the last commit.
//
//	go run ./cmd/package -chart ../../deploy/helm/veil-exporter -out ../../dist
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/veil-exporter/veil-exporter/tools/chart"
)

func main() {
	chartDir := flag.String("chart", "../../deploy/helm/veil-exporter", "the chart's directory")
	out := flag.String("out", "../../dist", "where the archive goes")
	mtime := flag.Int64("mtime", envEpoch(), "the time of every entry, in Unix seconds (default: $SOURCE_DATE_EPOCH, or 0)")
	flag.Parse()
	path, err := chart.Package(*chartDir, *out, time.Unix(*mtime, 0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func envEpoch() int64 {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "package: SOURCE_DATE_EPOCH=%q is not a number of seconds\n", s)
		os.Exit(2)
	}
	return n
}
