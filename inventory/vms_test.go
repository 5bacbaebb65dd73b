package inventory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/veil-exporter/veil-exporter/veil"
)

// TestVMsFollowASortedSlice applies random puts and removes to a VMs and to a plain sorted
// slice, checking after each that they list the same VMs, and that every earlier VMs still
// lists what it did (a put or remove never changes a list readers hold).
func TestVMsFollowASortedSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	id := func() string { return fmt.Sprintf("vm-%05d", rng.IntN(6000)) }
	var want []*veil.Domain
	for range 2000 {
		d := &veil.Domain{ID: id()}
		if i, found := slices.BinarySearchFunc(want, d.ID, byIDTest); !found {
			want = slices.Insert(want, i, d)
		}
	}
	v := NewVMs(slices.Clone(want))
	type version struct {
		v    VMs
		want []*veil.Domain
	}
	var kept []version
	for step := range 6000 {
		d := &veil.Domain{ID: id(), VerboseName: fmt.Sprint(step)}
		i, found := slices.BinarySearchFunc(want, d.ID, byIDTest)
		if rng.IntN(3) == 0 {
			v = v.remove(d.ID)
			if found {
				want = slices.Delete(slices.Clone(want), i, i+1)
			}
		} else {
			v = v.put(d)
			want = slices.Clone(want)
			if found {
				want[i] = d
			} else {
				want = slices.Insert(want, i, d)
			}
		}
		if step%500 == 0 {
			kept = append(kept, version{v, want})
		}
		if step%97 == 0 {
			sameVMs(t, v, want)
		}
	}
	sameVMs(t, v, want)
	for _, k := range kept {
		sameVMs(t, k.v, k.want)
	}
	for _, c := range v.chunks {
		if len(c.vms) == 0 || len(c.vms) >= 2*vmChunkSize {
			t.Fatalf("a chunk of %d VMs", len(c.vms))
		}
	}
	if len(v.chunks) < 2 {
		t.Fatalf("%d chunks for %d VMs", len(v.chunks), v.Len())
	}
}

// TestVMsEmpty: the zero list takes a first VM and gives its last one back.
func TestVMsEmpty(t *testing.T) {
	var v VMs
	if v.Len() != 0 || v.Slice() != nil {
		t.Fatal("the zero VMs is not empty")
	}
	if _, ok := v.Find("x"); ok {
		t.Fatal("found a VM in the zero VMs")
	}
	if got := v.remove("x"); got.Len() != 0 {
		t.Fatal("removing from the zero VMs made one")
	}
	one := v.put(&veil.Domain{ID: "x"})
	sameVMs(t, one, []*veil.Domain{one.At(0)})
	if none := one.remove("x"); none.Len() != 0 || len(none.chunks) != 0 {
		t.Fatalf("after removing the only VM: %d VMs in %d chunks", none.Len(), len(none.chunks))
	}
}

// TestSameIDs: lists of the same ids are the same whatever their chunks and VMs' contents;
// one id more, less or other is not.
func TestSameIDs(t *testing.T) {
	var ds []*veil.Domain
	for i := range 3000 {
		ds = append(ds, &veil.Domain{ID: fmt.Sprintf("vm-%05d", i)})
	}
	a := NewVMs(slices.Clone(ds))
	renamed := a.put(&veil.Domain{ID: "vm-01234", VerboseName: "renamed"})
	grown := a.put(&veil.Domain{ID: "vm-01234a"})
	// 600 VMs into one chunk split it; with them gone, the list has a's ids in other chunks.
	regrouped := a
	for k := range 600 {
		regrouped = regrouped.put(&veil.Domain{ID: fmt.Sprintf("vm-00100-%03d", k)})
	}
	for k := range 600 {
		regrouped = regrouped.remove(fmt.Sprintf("vm-00100-%03d", k))
	}
	if len(regrouped.chunks) == len(a.chunks) {
		t.Fatalf("%d chunks after a split, as many as before", len(regrouped.chunks))
	}
	for name, c := range map[string]struct {
		b    VMs
		same bool
	}{
		"itself": {a, true}, "a VM replaced": {renamed, true}, "cut again": {NewVMs(slices.Clone(ds)), true},
		"one more": {grown, false}, "one less": {a.remove("vm-00000"), false}, "back as it was": {regrouped, true},
		"another id": {a.remove("vm-02999").put(&veil.Domain{ID: "vm-03000"}), false},
	} {
		if got := sameIDs(a, c.b); got != c.same {
			t.Errorf("%s: sameIDs %v, want %v", name, got, c.same)
		}
	}
}

func byIDTest(d *veil.Domain, id string) int { return strings.Compare(d.ID, id) }

// sameVMs checks every way of reading v against want.
func sameVMs(t *testing.T, v VMs, want []*veil.Domain) {
	t.Helper()
	if v.Len() != len(want) {
		t.Fatalf("%d VMs, want %d", v.Len(), len(want))
	}
	if got := v.Slice(); !slices.Equal(got, want) {
		t.Fatal("Slice differs from the sorted slice")
	}
	i := 0
	for d := range v.All() {
		if d != want[i] || v.At(i) != d {
			t.Fatalf("VM %d: All %s, At %s, want %s", i, d.ID, v.At(i).ID, want[i].ID)
		}
		i++
	}
	for _, w := range want {
		if d, ok := v.Find(w.ID); !ok || d != w {
			t.Fatalf("Find(%s) = %v, %v", w.ID, d, ok)
		}
	}
	if _, ok := v.Find(want[0].ID + "~"); ok && !slices.ContainsFunc(want, func(d *veil.Domain) bool { return d.ID == want[0].ID+"~" }) {
		t.Fatal("found an id that is not there")
	}
}
