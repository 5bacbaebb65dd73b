// Tests of the choice of owners: even counts, the same everywhere, and few moves when a
// replica joins or leaves.

package ha

import (
	"fmt"
	"maps"
	"slices"
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
			a := assign(everyone(insts, ctrls), nil)
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
	want := assign(everyone(insts, ctrls), nil)
	// Map order differs run to run; the result must not.
	for range 20 {
		if got := assign(everyone(insts, ctrls), nil); !maps.Equal(got, want) {
			t.Fatalf("assignment changed between calls: %v vs %v", got, want)
		}
	}
}

func TestAssignMovesFewWhenAReplicaJoins(t *testing.T) {
	ctrls := names("ctl", 12)
	before := assign(everyone(names("pod-", 3), ctrls), nil)
	after := assign(everyone(names("pod-", 4), ctrls), before)
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

// TestAssignMovesOnlyTheLeaversControllers: whichever of m replicas leaves, the survivors keep
// every controller they held (what make demo-ha showed moving: a controller of a live replica
// handed to the other survivor after a kill -9) and the counts still differ by at most one.
func TestAssignMovesOnlyTheLeaversControllers(t *testing.T) {
	for m := 2; m <= 5; m++ {
		for _, n := range []int{1, 3, 7, 12, 31, 60} {
			insts, ctrls := names("pod-", m), names("ctl", n)
			before := assign(everyone(insts, ctrls), nil)
			for gone := range insts {
				rest := slices.Delete(slices.Clone(insts), gone, gone+1)
				held := maps.Clone(before)
				maps.DeleteFunc(held, func(_, i string) bool { return i == insts[gone] })
				after := assign(everyone(rest, ctrls), held)
				for c, i := range held {
					if after[c] != i {
						t.Errorf("m=%d n=%d, %s gone: %s moved from %s, which is alive, to %s", m, n, insts[gone], c, i, after[c])
					}
				}
				c := counts(after)
				lo, hi := n, 0
				for _, i := range rest {
					lo, hi = min(lo, c[i]), max(hi, c[i])
				}
				if len(after) != n || hi-lo > 1 {
					t.Errorf("m=%d n=%d, %s gone: %d assigned, counts %v", m, n, insts[gone], len(after), c)
				}
			}
		}
	}
}

// TestAssignKeepsABalancedHolding: when every replica holds its share, the assignment is what
// they hold, so nothing moves; a holder above its share gives up only the excess.
func TestAssignKeepsABalancedHolding(t *testing.T) {
	insts, ctrls := names("pod-", 3), names("ctl", 20)
	want := assign(everyone(insts, ctrls), nil)
	if got := assign(everyone(insts, ctrls), want); !maps.Equal(got, want) {
		t.Errorf("a balanced holding changed: %v -> %v", want, got)
	}
	// pod-0 holds everything (it started first): it keeps 7, the best scoring for it.
	all := map[string]string{}
	for _, c := range ctrls {
		all[c] = "pod-0"
	}
	got := assign(everyone(insts, ctrls), all)
	if c := counts(got); c["pod-0"] != 7 || c["pod-1"]+c["pod-2"] != 13 || max(c["pod-1"], c["pod-2"]) != 7 {
		t.Errorf("counts %v, want 7, 7 and 6 with 7 for pod-0", c)
	}
}

func TestAssignHonoursWhatEachReplicaIsConfiguredWith(t *testing.T) {
	a := assign(map[string][]string{
		"pod-0": {"a", "b", "c"},
		"pod-1": {"a", "b"},
	}, nil)
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

// TestAssignShedsWhatAHolderTookLast: one of three replicas dies, and one survivor takes all of
// its controllers (in its view the other survivor's announcement was late for a moment, so it
// was the only live replica). Once both survivors are seen again, it gives back to the other
// the controllers it took last — the dead replica's — and keeps every one it held before: the
// fleet benchmark must see no healthy controller move. By score alone it sheds its worst
// scoring, its own among them.
func TestAssignShedsWhatAHolderTookLast(t *testing.T) {
	for _, n := range []int{7, 30, 60} {
		insts, ctrls := names("pod-", 3), names("ctl", n)
		before := assign(everyone(insts, ctrls), nil)
		held, since := map[string]string{}, map[string]int64{}
		for _, c := range ctrls {
			switch before[c] {
			case "pod-0": // dead; pod-1 took its controllers at 2
				held[c], since[c] = "pod-1", 2
			default:
				held[c], since[c] = before[c], 1
			}
		}
		after := assignSince(everyone(insts[1:], ctrls), held, since)
		for c, i := range before {
			if i != "pod-0" && after[c] != i {
				t.Errorf("n=%d: %s moved from %s, which is alive, to %s", n, c, i, after[c])
			}
		}
		cnt := counts(after)
		if d := cnt["pod-1"] - cnt["pod-2"]; d < -1 || d > 1 {
			t.Errorf("n=%d: counts %v differ by more than one", n, cnt)
		}
	}
}
