// Pushed changes: objects the controller's push channel sent, applied to the inventory between
// its refreshes (the pace of those refreshes while the push runs is in pacing.go).

package inventory

import (
	"errors"
	"slices"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// pushResources are the collections whose changes the inventory takes from the push channel,
// by resource. Tasks are not among them: their counts and backups come from the incremental
// task read, which stays on collect.interval.
var pushResources = map[string]string{"/nodes/": collNodes, "/clusters/": collClusters, "/data-pools/": collDatapools, "/domains/": collDomains}

// PushResources are the resources of the push channel the inventory follows: those of its
// enabled collections (collect.nodes, ...), sorted.
func (s *Store) PushResources() []string {
	var out []string
	for r, coll := range pushResources {
		if slices.Contains(s.enabled, coll) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// PushDrop is why a pushed frame was not applied.
type PushDrop string

// Reasons a frame is dropped (veil_push_frames_dropped_total's reason label).
const (
	DropBadObject       PushDrop = "bad_object"       // the object does not decode
	DropUnknownResource PushDrop = "unknown_resource" // not one of PushResources()
	DropTooLarge        PushDrop = "too_large"        // over veil.MaxPushFrame: the socket ends
)

// Apply applies pushed frames in order and stores the snapshot they make. It returns the
// frames it dropped by reason. A frame applied while a refresh lists the collections is
// applied again over the refresh's result, so an older listing never undoes a newer push.
func (s *Store) Apply(frames []veil.PushFrame) map[PushDrop]int {
	var drops map[PushDrop]int
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &edit{snap: s.snap.next()}
	now := time.Now()
	for _, f := range frames {
		why := s.applyFrame(e, f, now)
		if why != "" {
			if drops == nil {
				drops = map[PushDrop]int{}
			}
			drops[why]++
			continue
		}
		e.snap.Applied++
		s.observing.pushed(f)
		s.pacing.keep(f)
	}
	if e.snap.Applied != s.snap.Applied { // frames all dropped change nothing
		s.publish(e.snap)
	}
	return drops
}

// edit is a snapshot being changed by pushed frames: each slice is copied once, at its first
// change (readers hold the old ones), and then changed in place. The VMs copy the chunk a
// frame changes (VMs.put).
type edit struct {
	snap                       *Snapshot
	nodes, clusters, datapools bool // copied already
	replaying                  bool // frames a listing has counted already
}

// own copies *s unless owned says it was copied already.
func own[T any](s *[]T, owned *bool) {
	if !*owned {
		*s, *owned = append(make([]T, 0, len(*s)+1), *s...), true
	}
}

// applyFrame applies one frame to e; s.mu is held.
func (s *Store) applyFrame(e *edit, f veil.PushFrame, now time.Time) PushDrop {
	if !slices.Contains(s.enabled, pushResources[f.Resource]) {
		return DropUnknownResource // a collection switched off, or none the push keeps fresh
	}
	del := f.Event == veil.PushDeleted
	switch f.Resource {
	case "/nodes/":
		return pushInto(pushSlice[veil.Node, *veil.Node]{&e.snap.Nodes, &e.nodes, func(n *veil.Node) string { return n.ID }, ref[veil.Node]}, f, del, s.names.learner(now), s.rejectFrame)
	case "/clusters/":
		return pushInto(pushSlice[veil.Cluster, veil.Cluster]{&e.snap.Clusters, &e.clusters, func(c veil.Cluster) string { return c.ID }, itself[veil.Cluster]}, f, del, s.names.learner(now), s.rejectFrame)
	case "/data-pools/":
		e.snap.DevicesGen++ // veil_datapool_provisioned_bytes lists every datapool
		return pushInto(pushSlice[veil.Datapool, veil.Datapool]{&e.snap.Datapools, &e.datapools, func(d veil.Datapool) string { return d.ID }, itself[veil.Datapool]}, f, del, s.names.learner(now), s.rejectFrame)
	case "/domains/":
		return s.pushDomain(e, f, del, now)
	}
	return DropUnknownResource
}

// pushDomain applies a domain frame: a VM that domain_include/exclude leave out is removed from
// the exported list (a rename may move it either way); the total counts creations and deletions.
func (s *Store) pushDomain(e *edit, f veil.PushFrame, del bool, now time.Time) PushDrop {
	snap := e.snap
	var d veil.Domain
	if !del {
		var err error
		if d, err = veil.DecodeObject[veil.Domain](f.Object); err != nil || d.ID != f.ID {
			s.rejectFrame(f, d.ID, err)
			return DropBadObject
		}
		s.names.learn(now, d.ID, d.VerboseName)
	}
	switch {
	case e.replaying:
	case f.Event == veil.PushCreated:
		snap.DomainsTotal++
	case f.Event == veil.PushDeleted:
		snap.DomainsTotal = max(0, snap.DomainsTotal-1)
	}
	_, found := snap.Domains.Find(f.ID)
	keep := !del && len(s.filter.domains([]veil.Domain{d})) == 1
	if !keep && !found {
		return ""
	}
	if !keep || !found {
		snap.DevicesGen++ // a VM came or went: the disks and interfaces shown follow it
	}
	if keep {
		snap.Domains = snap.Domains.put(&d)
	} else {
		snap.Domains = snap.Domains.remove(f.ID)
	}
	snap.DomainsGen++
	snap.logDomain(f.ID)
	return ""
}

// rejectFrame tells the client's Rejected about a pushed object that does not decode (err), or
// decodes with another id (got) than its frame's.
func (s *Store) rejectFrame(f veil.PushFrame, got string, err error) {
	r := veil.Rejection{Collection: veil.CollectionOf(f.Resource), ID: f.ID, Field: "id", Reason: veil.RejectMissingID, Count: 1}
	switch {
	case err != nil:
		var de *veil.DecodeError
		r.Field, r.Reason, r.Err = "", veil.RejectDecode, err
		if errors.As(err, &de) {
			r.Field, r.Reason = de.Field, de.Reason
		}
	case got != "":
		r.Reason, r.Err = veil.RejectDecode, errors.New("the object's id is not the frame's")
	default:
		r.Err = errors.New("the object has no id")
	}
	s.client.Reject(r)
}

// pushSlice is the slice of E a class without filters is pushed into: owned says whether the
// edit owns it yet (own copies it first), id is an element's, and wrap makes one of a decoded O
// (a value is itself, a node its pointer).
type pushSlice[O, E any] struct {
	s     *[]E
	owned *bool
	id    func(E) string
	wrap  func(O) E
}

// pushInto applies a frame of a class without filters to its slice; reject is told about an
// object that does not decode.
func pushInto[O, E any](t pushSlice[O, E], f veil.PushFrame, del bool, learn func(id, name string), reject func(f veil.PushFrame, got string, err error)) PushDrop {
	s, owned, id, wrap := t.s, t.owned, t.id, t.wrap
	i := indexOf(*s, f.ID, id)
	if del {
		if i >= 0 {
			own(s, owned)
			*s = slices.Delete(*s, i, i+1)
		}
		return ""
	}
	o, err := veil.DecodeObject[O](f.Object)
	v := wrap(o)
	if err != nil || id(v) != f.ID {
		reject(f, id(v), err)
		return DropBadObject
	}
	_, name := identity(o)
	learn(f.ID, name)
	own(s, owned)
	if i >= 0 {
		(*s)[i] = v
	} else {
		*s = append(*s, v)
	}
	return ""
}

// itself is wrap for a slice of values.
func itself[T any](v T) T { return v }

// ref is wrap for a slice of pointers.
func ref[T any](v T) *T { return &v }

// identity is the id and name of an object of a pushed collection.
func identity(v any) (id, name string) {
	switch o := v.(type) {
	case veil.Node:
		return o.ID, o.VerboseName
	case veil.Cluster:
		return o.ID, o.VerboseName
	case veil.Datapool:
		return o.ID, o.VerboseName
	case veil.Domain:
		return o.ID, o.VerboseName
	}
	return "", ""
}

func indexOf[T any](s []T, want string, id func(T) string) int {
	for i := range s {
		if id(s[i]) == want {
			return i
		}
	}
	return -1
}
