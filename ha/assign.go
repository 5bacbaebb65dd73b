// This file holds the choice of a controller's owner: rendezvous hashing over the live
// instances, bounded so that the counts differ by at most one, and sticky: a live holder keeps
// what it holds while it has room.

package ha

import (
	"cmp"
	"hash/fnv"
	"slices"
	"sort"
)

// score ranks instance for controller: the same on every replica, unrelated across pairs.
func score(controller, instance string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(controller))
	h.Write([]byte{0})
	h.Write([]byte(instance))
	// FNV alone clusters on short similar strings; the splitmix64 finaliser spreads it.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// assign maps every controller that some instance announces to its desired owner. eligible
// lists, per live instance, the controllers it is configured with; held maps a controller to
// the live instance holding it now (nil: none held). Each instance has room for n/m
// controllers, or n/m+1 for n%m of them, so the counts differ by at most one.
//
// First every holder keeps what it holds, its best scoring first (assignSince: its longest held
// first), up to n/m; the n%m places of
// n/m+1 go to the holders holding the most (then by name), which keep one more. Only then are
// the other controllers placed, by falling score (plain rendezvous hashing) while an instance
// has room. So when an instance leaves, only its controllers move, and when one joins, only
// what the others hold above their new share moves to it; with nothing held, the assignment
// is bounded rendezvous hashing. A controller whose eligible instances are all full (configs
// that differ between replicas) goes to its best scoring one.
func assign(eligible map[string][]string, held map[string]string) map[string]string {
	return assignSince(eligible, held, nil)
}

// assignSince is assign where a holder above its share keeps what it has held longest (since:
// a controller's acquisition by its holder, Unix nanoseconds on the holder's own clock, which
// orders only that holder's leases; the same in every replica's view of the bucket), its best
// scoring first among equals. So a holder that took more than its share (a dead replica's
// controllers, taken while another survivor's announcement was late in its view) gives back
// what it took last, never a controller it ran before: only the dead replica's controllers
// move. With since nil it is assign.
func assignSince(eligible map[string][]string, held map[string]string, since map[string]int64) map[string]string {
	pairs, kept, n := scoredPairs(eligible, held)
	m := len(eligible)
	out := make(map[string]string, n)
	if m == 0 {
		return out
	}
	base, extra := n/m, n%m
	count := map[string]int{}
	extra = keepHeld(kept, since, shares{base, extra}, out, count)
	for _, p := range pairs {
		if _, done := out[p.c]; done {
			continue
		}
		switch k := count[p.i]; {
		case k < base:
		case k == base && extra > 0:
			extra--
		default:
			continue
		}
		count[p.i]++
		out[p.c] = p.i
	}
	for _, p := range pairs { // best score first
		if _, done := out[p.c]; !done {
			out[p.c] = p.i
		}
	}
	return out
}

// pair is a controller c on an eligible instance i, with its score s.
type pair struct {
	c, i string
	s    uint64
}

// byScore orders pairs best score first, then by controller and instance.
func byScore(a, b pair) int {
	if a.s != b.s {
		return cmp.Compare(b.s, a.s)
	}
	if a.c != b.c {
		return cmp.Compare(a.c, b.c)
	}
	return cmp.Compare(a.i, b.i)
}

// scoredPairs are every eligible pair, best score first; kept, per holder, the pairs it holds
// and may keep; n the number of controllers.
func scoredPairs(eligible map[string][]string, held map[string]string) (pairs []pair, kept map[string][]pair, n int) {
	ctrls := map[string]bool{}
	kept = map[string][]pair{}
	for inst, cs := range eligible {
		for _, c := range cs {
			ctrls[c] = true
			p := pair{c, inst, score(c, inst)}
			pairs = append(pairs, p)
			if held[c] == inst {
				kept[inst] = append(kept[inst], p)
			}
		}
	}
	sort.Slice(pairs, func(a, b int) bool { return byScore(pairs[a], pairs[b]) < 0 })
	return pairs, kept, len(ctrls)
}

// shares is how many controllers each instance runs: base, and base+1 for extra of them.
type shares struct{ base, extra int }

// keepHeld leaves each holder what it holds, up to its share (base, or base+1 while extra
// places remain, given to those holding the most), what it has held longest first; it fills
// out and count and returns the extra places left.
func keepHeld(kept map[string][]pair, since map[string]int64, sh shares, out map[string]string, count map[string]int) int {
	base, extra := sh.base, sh.extra
	holders := make([]string, 0, len(kept))
	for inst, ps := range kept {
		slices.SortFunc(ps, func(a, b pair) int {
			if c := cmp.Compare(since[a.c], since[b.c]); c != 0 {
				return c
			}
			return byScore(a, b)
		})
		holders = append(holders, inst)
	}
	// Those holding the most keep the places of n/m+1.
	slices.SortFunc(holders, func(a, b string) int {
		if c := cmp.Compare(len(kept[b]), len(kept[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, inst := range holders {
		room := base
		if len(kept[inst]) > base && extra > 0 {
			room++
			extra--
		}
		for _, p := range kept[inst][:min(room, len(kept[inst]))] {
			out[p.c] = inst
			count[inst]++
		}
	}
	return extra
}
