// This file holds the choice of a controller's owner: rendezvous hashing over the live
// instances, bounded so that the counts differ by at most one.
package ha

import (
	"hash/fnv"
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
// lists, per live instance, the controllers it is configured with. Pairs are taken by
// falling score (plain rendezvous hashing) while an instance has room, the room being n/m or,
// for the first n%m instances to reach it, n/m+1: so an instance joining or leaving moves
// few controllers and the counts differ by at most one. A controller whose eligible instances
// are all full (configs that differ between replicas) goes to its best scoring one.
func assign(eligible map[string][]string) map[string]string {
	type pair struct {
		c, i string
		s    uint64
	}
	var pairs []pair
	ctrls := map[string]bool{}
	for inst, cs := range eligible {
		for _, c := range cs {
			ctrls[c] = true
			pairs = append(pairs, pair{c, inst, score(c, inst)})
		}
	}
	sort.Slice(pairs, func(a, b int) bool {
		pa, pb := pairs[a], pairs[b]
		if pa.s != pb.s {
			return pa.s > pb.s
		}
		if pa.c != pb.c {
			return pa.c < pb.c
		}
		return pa.i < pb.i
	})
	n, m := len(ctrls), len(eligible)
	out := make(map[string]string, n)
	if m == 0 {
		return out
	}
	base, extra := n/m, n%m
	count := map[string]int{}
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
