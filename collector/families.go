package collector

// A family declared once: its Desc and the series an object has in it (as kube-state-metrics'
// FamilyGenerator). A render adds each object's series; whether a change to an object changed
// a family is whether the series of its two versions differ, so what a family shows and what
// re-renders it are the same code, and a field the series read can never be left out of the
// comparison.

import (
	"math"
	"unsafe"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
)

// maxLabels bounds the variable labels of a family (veil_vdisk_info has 8).
const maxLabels = 8

// maxFamilies bounds the families of one kind of object: a change says which it changed in, a
// bit each.
const maxFamilies = 32

// sample is an object's series in one family: its value and label values, or none (ok false).
// With against set, set compares the series with against's instead of keeping it (differs).
type sample struct {
	v      float64
	ok     bool
	n      int
	labels [maxLabels]string

	against *sample
	// keys are where the ids of against's object and of this one are (equal: the caller
	// matched the objects by them).
	keys    [2]*byte
	differs bool
}

// set makes s the series of value v with those label values (the Desc's variable labels, in
// their order; at most maxLabels), or with against compares them with its.
func (s *sample) set(v float64, labels ...string) {
	s.ok = true
	if s.against == nil {
		s.v, s.n = v, copy(s.labels[:], labels)
		return
	}
	s.differs = s.differ(v, labels)
}

// differ says whether against is not the series of value v with those labels. A label that is
// the id in both is equal without reading it again.
func (s *sample) differ(v float64, labels []string) bool {
	a := s.against
	if !a.ok || math.Float64bits(a.v) != math.Float64bits(v) || a.n != len(labels) {
		return true
	}
	for i, l := range labels {
		w := a.labels[i]
		switch pw, pl := unsafe.StringData(w), unsafe.StringData(l); {
		case len(w) != len(l):
			return true
		case pw == pl, pw == s.keys[0] && pl == s.keys[1]:
		case w != l:
			return true
		}
	}
	return false
}

// family is one family of objects of type T: its Desc (name, help, type and label names) and
// series, which sets the series an object has in it (none: it leaves s as it finds it).
type family[T any] struct {
	desc   *exposition.Desc
	series func(o *T, s *sample)
}

// add adds o's series of f to e, if it has one; s is scratch (reused: an object's series does
// not escape to the heap one by one).
func (f *family[T]) add(e exposition.Sink, o *T, s *sample) {
	s.ok = false
	f.series(o, s)
	if s.ok {
		e.Add(f.desc, s.v, s.labels[:s.n]...)
	}
}

// differ tells the families two versions of an object changed in.
type differ[T any] struct {
	fams     []family[T]
	was, now sample // now compares against was
}

func newDiffer[T any](fams []family[T]) *differ[T] {
	d := &differ[T]{fams: fams}
	d.now.against = &d.was
	return d
}

// changed has a bit set for each family whose series of a and b differ, whose ids key are
// equal. None when they are the same object (a snapshot's objects are never modified, so an
// object no push or listing replaced is its pointer); otherwise each family's series of a is
// made and b's compared with it as it is made.
func (d *differ[T]) changed(a, b *T, key [2]string) uint32 {
	if a == b {
		return 0
	}
	var m uint32
	d.now.keys = [2]*byte{unsafe.StringData(key[0]), unsafe.StringData(key[1])}
	for k := range d.fams {
		d.was.ok, d.now.ok, d.now.differs = false, false, false
		d.fams[k].series(a, &d.was)
		d.fams[k].series(b, &d.now)
		if d.now.differs || d.now.ok != d.was.ok {
			m |= 1 << k
		}
	}
	return m
}

// keepAll keeps every one of fams as the previous render holds them; false (nothing kept)
// when there is none to keep from.
func keepAll[T any](e exposition.Sink, fams []family[T]) bool {
	if len(fams) == 0 || !e.Keep(fams[0].desc) {
		return false
	}
	for k := range fams[1:] {
		e.Keep(fams[1+k].desc)
	}
	return true
}

// addAll adds the series of every object of objs to each of fams, family after family, without
// flushing.
func addAll[T any](e exposition.Sink, fams []family[T], objs []T) {
	s := new(sample)
	for k := range fams {
		for i := range objs {
			fams[k].add(e, &objs[i], s)
		}
	}
}

// descs are the Descs of fams, in their order.
func descs[T any](fams []family[T]) []*exposition.Desc {
	out := make([]*exposition.Desc, len(fams))
	for k := range fams {
		out[k] = fams[k].desc
	}
	return out
}

// patchShare: a family is patched while at most 1/patchShare of the objects changed in it,
// and emitted whole beyond (a refresh that moved every VM's usage): patching reads back and
// cuts again every block it touches.
const patchShare = 4

// change is an object that changed since the last render: its version then (nil: it is new)
// and now (nil: it is gone), and the families it changed in, a bit each.
type change[T any] struct {
	old, now *T
	fams     uint32
}

// changeSet is what changed since the last render among total objects; usable says that the
// last render is what the changes are against.
type changeSet[T any] struct {
	changes []change[T]
	total   int
	usable  bool
}

// keepOrPatch renders family k from the changes alone where it can: kept when no object changed
// in it, patched when at most 1/patchShare of the total did (the changed objects' old series
// removed, their new ones added). Neither: the caller emits the family whole.
func (cs changeSet[T]) keepOrPatch(e exposition.Sink, f *family[T], k int, s *sample) (kept, patched bool) {
	if !cs.usable {
		return false, false
	}
	bit, n := uint32(1)<<k, 0
	for _, c := range cs.changes {
		if c.fams&bit != 0 {
			n++
		}
	}
	if n == 0 && e.Keep(f.desc) {
		return true, false
	}
	if n > cs.total/patchShare || !e.Patch(f.desc) {
		return false, false
	}
	rm := e.Removing()
	for _, c := range cs.changes {
		if c.fams&bit == 0 {
			continue
		}
		if c.old != nil {
			f.add(rm, c.old, s)
		}
		if c.now != nil {
			f.add(e, c.now, s)
		}
	}
	return false, true
}
