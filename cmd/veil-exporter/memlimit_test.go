package main

import (
	"bytes"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-kit/log"
)

func TestMemLimitFollowsTheCgroup(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const gib = 1 << 30
	for _, tc := range []struct {
		name   string
		env    string // GOMEMLIMIT, "" unset
		limit  uint64
		err    error
		want   int64 // the Go limit afterwards; math.MaxInt64 is none
		logged string
	}{
		{name: "cgroup limit", limit: gib, want: gib * 9 / 10, logged: "gomemlimit_bytes=966367641"},
		{name: "no cgroup limit", err: memlimit.ErrNoLimit, want: math.MaxInt64, logged: "no cgroup memory limit"},
		{name: "no cgroups", err: memlimit.ErrCgroupsNotSupported, want: math.MaxInt64, logged: "couldn't read the cgroup memory limit"},
		{name: "GOMEMLIMIT wins", env: "300MiB", limit: gib, want: math.MaxInt64, logged: "GOMEMLIMIT=300MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
			}
			var buf bytes.Buffer
			asked := false
			setMemLimit(log.NewLogfmtLogger(&buf), func() (uint64, error) {
				asked = true
				return tc.limit, tc.err
			})
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("Go memory limit %d, want %d", got, tc.want)
			}
			if tc.env != "" && asked {
				t.Error("the cgroup was read although GOMEMLIMIT is set")
			}
			if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), tc.logged) {
				t.Errorf("log %q: want one line with %q", buf.String(), tc.logged)
			}
		})
	}
}

func TestGCPercentUnlessGOGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, tc := range []struct {
		name   string
		env    string // GOGC, "" unset
		want   int
		logged string
	}{
		{name: "default", want: defaultGCPercent, logged: fmt.Sprintf("gogc=%d", defaultGCPercent)},
		{name: "GOGC wins", env: "80", want: 100, logged: "GOGC=80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			if tc.env != "" {
				t.Setenv("GOGC", tc.env)
			}
			var buf bytes.Buffer
			setGCPercent(log.NewLogfmtLogger(&buf), defaultGCPercent)
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GOGC %d, want %d", got, tc.want)
			}
			if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), tc.logged) {
				t.Errorf("log %q: want one line with %q", buf.String(), tc.logged)
			}
		})
	}
}
