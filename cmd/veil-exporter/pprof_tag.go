//go:build pprof

package main

// Built with -tags pprof only (never in a release): /debug/pprof on $VEIL_PPROF_ADDR, to profile
// the exporter's heap at its peak from outside.

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if a := os.Getenv("VEIL_PPROF_ADDR"); a != "" {
		go func() { _ = http.ListenAndServe(a, nil) }()
	}
}
