package inventory

// VMs: a snapshot's list of VMs, sorted by id and held in chunks, so that a pushed change
// copies the chunk it touches and the snapshots before and after it share all the others.

import (
	"iter"
	"slices"
	"sort"
	"strings"

	"github.com/veil-exporter/veil-exporter/veil"
)

// vmChunkSize is how many VMs a listing puts in a chunk; an insert splits a chunk at twice
// that. A pushed change copies one chunk (4 KB of pointers) and the chunks' index (a few KB at
// 50,000 VMs) instead of the whole list (400 KB at 50,000 VMs, each pushed batch: the
// collector's work grew with the inventory).
const vmChunkSize = 512

// VMs is a list of VMs sorted by id. The zero value is empty. A VMs never changes: put and
// remove return a new one, which shares the chunks they did not touch.
type VMs struct {
	chunks []vmChunk
	n      int
}

// vmChunk is a run of the list: never empty, never changed once in a VMs.
type vmChunk struct {
	start int // index of its first VM in the list
	vms   []*veil.Domain
}

// NewVMs returns the list of ds, which must be sorted by id and is not copied: the caller
// gives it up.
func NewVMs(ds []*veil.Domain) VMs {
	v := VMs{n: len(ds)}
	for i := 0; i < len(ds); i += vmChunkSize {
		j := min(i+vmChunkSize, len(ds))
		v.chunks = append(v.chunks, vmChunk{start: i, vms: ds[i:j:j]})
	}
	return v
}

// Len is the number of VMs.
func (v VMs) Len() int { return v.n }

// At returns the i-th VM by id.
func (v VMs) At(i int) *veil.Domain {
	c := sort.Search(len(v.chunks), func(k int) bool { return v.chunks[k].start > i }) - 1
	return v.chunks[c].vms[i-v.chunks[c].start]
}

// All yields the VMs in order of id.
func (v VMs) All() iter.Seq[*veil.Domain] {
	return func(yield func(*veil.Domain) bool) {
		for _, c := range v.chunks {
			for _, d := range c.vms {
				if !yield(d) {
					return
				}
			}
		}
	}
}

// Slice returns the VMs in a slice of their own.
func (v VMs) Slice() []*veil.Domain {
	if v.n == 0 {
		return nil
	}
	out := make([]*veil.Domain, 0, v.n)
	for _, c := range v.chunks {
		out = append(out, c.vms...)
	}
	return out
}

// Find returns the VM with id.
func (v VMs) Find(id string) (*veil.Domain, bool) {
	c, j, found := v.locate(id)
	if !found {
		return nil, false
	}
	return v.chunks[c].vms[j], true
}

// locate returns the chunk an id is in or would go to, its place there, and whether it is
// there. An empty list has no chunk: c is 0.
func (v VMs) locate(id string) (c, j int, found bool) {
	if len(v.chunks) == 0 {
		return 0, 0, false
	}
	c = sort.Search(len(v.chunks), func(k int) bool {
		vms := v.chunks[k].vms
		return vms[len(vms)-1].ID >= id
	})
	c = min(c, len(v.chunks)-1) // past the last: appended to it
	j, found = slices.BinarySearchFunc(v.chunks[c].vms, id, func(d *veil.Domain, id string) int { return strings.Compare(d.ID, id) })
	return c, j, found
}

// put returns the list with d in place of the VM of its id, or inserted in order.
func (v VMs) put(d *veil.Domain) VMs {
	if len(v.chunks) == 0 {
		return NewVMs([]*veil.Domain{d})
	}
	c, j, found := v.locate(d.ID)
	old := v.chunks[c].vms
	var vms []*veil.Domain
	if found {
		vms = slices.Clone(old)
		vms[j] = d
		return v.with(c, 0, vms)
	}
	vms = make([]*veil.Domain, 0, len(old)+1)
	vms = append(append(append(vms, old[:j]...), d), old[j:]...)
	if len(vms) < 2*vmChunkSize {
		return v.with(c, 1, vms)
	}
	half := len(vms) / 2
	out := v.with(c, 1, vms[:half:half])
	out.chunks = slices.Insert(out.chunks, c+1, vmChunk{start: out.chunks[c].start + half, vms: vms[half:]})
	return out
}

// remove returns the list without the VM of id.
func (v VMs) remove(id string) VMs {
	c, j, found := v.locate(id)
	if !found {
		return v
	}
	old := v.chunks[c].vms
	if len(old) == 1 {
		out := v.with(c, -1, old)
		out.chunks = slices.Delete(out.chunks, c, c+1)
		return out
	}
	return v.with(c, -1, slices.Delete(slices.Clone(old), j, j+1))
}

// with returns a copy of the chunks' index with chunk c's VMs replaced by vms and the chunks
// after it moved by grown places.
func (v VMs) with(c, grown int, vms []*veil.Domain) VMs {
	out := VMs{chunks: slices.Clone(v.chunks), n: v.n + grown}
	out.chunks[c].vms = vms
	for k := c + 1; k < len(out.chunks); k++ {
		out.chunks[k].start += grown
	}
	return out
}

// sameIDs says whether a and b list the same ids in the same order; chunks they share are not
// compared again.
func sameIDs(a, b VMs) bool {
	if a.n != b.n {
		return false
	}
	if len(a.chunks) == len(b.chunks) {
		same := true
		for k := range a.chunks {
			x, y := a.chunks[k].vms, b.chunks[k].vms
			if len(x) != len(y) {
				same = false
				break
			}
			if len(x) > 0 && &x[0] == &y[0] {
				continue
			}
			if !slices.EqualFunc(x, y, func(p, q *veil.Domain) bool { return p.ID == q.ID }) {
				return false
			}
		}
		if same {
			return true
		}
	}
	i := 0
	for d := range a.All() {
		if b.At(i).ID != d.ID {
			return false
		}
		i++
	}
	return true
}
