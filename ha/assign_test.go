package ha

import (
	"fmt"
	"maps"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func everyone(insts, ctrls []string) map[string][]string {
	m := map[string][]string{}
	for _, i := range insts {
		m[i] = ctrls
	}
	return m
}

func counts(a map[string]string) map[string]int {
	c := map[string]int{}
	for _, i := range a {
		c[i]++
	}
	return c
}

func TestAssignSpreadsEvenly(t *testing.T) {
	for m := 1; m <= 5; m++ {
		for n := 0; n <= 20; n++ {
			insts, ctrls := names("pod-", m), names("ctl", n)
			a := assign(everyone(insts, ctrls))
			if len(a) != n {
				t.Fatalf("m=%d n=%d: %d of %d controllers assigned", m, n, len(a), n)
			}
			c := counts(a)
			lo, hi := n, 0
			for _, i := range insts {
				lo, hi = min(lo, c[i]), max(hi, c[i])
			}
			if hi-lo > 1 {
				t.Errorf("m=%d n=%d: counts %v differ by %d", m, n, c, hi-lo)
			}
		}
	}
}

func TestAssignIsTheSameEverywhere(t *testing.T) {
	insts, ctrls := names("pod-", 3), names("ctl", 7)
	want := assign(everyone(insts, ctrls))
	// Map order differs run to run; the result must not.
	for range 20 {
		if got := assign(everyone(insts, ctrls)); !maps.Equal(got, want) {
			t.Fatalf("assignment changed between calls: %v vs %v", got, want)
		}
	}
}

func TestAssignMovesFewWhenAReplicaJoins(t *testing.T) {
	ctrls := names("ctl", 12)
	before := assign(everyone(names("pod-", 3), ctrls))
	after := assign(everyone(names("pod-", 4), ctrls))
	moved := 0
	for c, i := range after {
		if before[c] != i {
			moved++
			if i != "pod-3" {
				t.Errorf("%s moved between old replicas (%s -> %s)", c, before[c], i)
			}
		}
	}
	if moved != 3 {
		t.Errorf("%d controllers moved, want 12/4 = 3 (to the new replica only)", moved)
	}
}

func TestAssignHonoursWhatEachReplicaIsConfiguredWith(t *testing.T) {
	a := assign(map[string][]string{
		"pod-0": {"a", "b", "c"},
		"pod-1": {"a", "b"},
	})
	if a["c"] != "pod-0" {
		t.Errorf("c went to %q, the only replica configured with it is pod-0", a["c"])
	}
	if len(a) != 3 {
		t.Errorf("assigned %v, want all of a, b, c", a)
	}
}

func TestKeyToken(t *testing.T) {
	for in, want := range map[string]string{"prod": "prod", "a-b_c": "a-b_c"} {
		if got := keyToken(in); got != want {
			t.Errorf("keyToken(%q) = %q, want %q", in, got, want)
		}
	}
	a, b := keyToken("a.b"), keyToken("a b")
	if a == b || a == "a_b" {
		t.Errorf("changed names must not collide: %q, %q", a, b)
	}
}
