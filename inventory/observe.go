// The observer side (observing): the objects of the pushed collections, as the controller lists
// or pushes them, handed to an Observer (the inventory on NATS) in the order the inventory learns
// them. Guarded by Store.mu: a refresh hands its listings over with the frames applied meanwhile
// folded in, under the lock that swaps the snapshot and ends the replay.

package inventory

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/veil-exporter/veil-exporter/veil"
)

// Classes of the observed objects (the bucket's key part).
const (
	ClassNode     = "node"
	ClassCluster  = "cluster"
	ClassDatapool = "datapool"
	ClassDomain   = "domain"
)

// classOf is the class of a pushed resource ("" for none observed).
var classOf = map[string]string{"/nodes/": ClassNode, "/clusters/": ClassCluster, "/data-pools/": ClassDatapool, "/domains/": ClassDomain}

// RawObject is one object as the controller listed or pushed it.
type RawObject struct {
	ID   string
	JSON json.RawMessage
}

// An Observer learns every object of the nodes, clusters, datapools and domains as the
// inventory does: a whole collection at each listing (an object of the class it lacks is gone),
// and each change pushed, in order (a frame pushed while a listing ran comes again after it).
// Its methods are called with the inventory's lock held: they must only take note.
type Observer interface {
	Listed(class string, objs []RawObject)
	Pushed(class string, obj RawObject, deleted bool)
}

// observing hands what the inventory learns to its Observer.
type observing struct {
	observer Observer               // nil: none
	listed   map[string][]RawObject // listings of the refresh being stored
}

// SetObserver makes o observe the inventory from its next listing; call it before Run.
func (s *Store) SetObserver(o Observer) {
	s.mu.Lock()
	s.observing.observer = o
	s.mu.Unlock()
}

// SetTaskObserver makes o learn the tasks seen finishing from the next refresh; call it
// before Run.
func (s *Store) SetTaskObserver(o TaskObserver) {
	s.tasks.mu.Lock()
	s.tasks.observer = o
	s.tasks.mu.Unlock()
}

// list reads a collection with read, or, with an observer, keeping each object's bytes.
func list[T any](ctx context.Context, s *Store, path string, read func(context.Context) ([]T, error)) ([]T, []RawObject, error) {
	s.mu.RLock()
	observed := s.observing.observer != nil
	s.mu.RUnlock()
	if !observed {
		v, err := read(ctx)
		return v, nil, err
	}
	rs, err := veil.ListAllRaw[T](ctx, s.client, path)
	if err != nil {
		return nil, nil, err
	}
	v := make([]T, len(rs))
	raw := make([]RawObject, len(rs))
	for i := range rs {
		v[i] = rs[i].Value
		id, _ := identity(rs[i].Value)
		raw[i] = RawObject{ID: id, JSON: rs[i].JSON}
	}
	return v, raw, nil
}

// keepListing keeps a listing for the observer until the refresh has stored everything it read
// (handListings); s.mu is held. raw is nil without an observer.
func (o *observing) keepListing(class string, raw []RawObject) {
	if o.observer != nil && raw != nil {
		if o.listed == nil {
			o.listed = map[string][]RawObject{}
		}
		o.listed[class] = raw
	}
}

// handListings hands the refresh's listings to the observer, each with the frames applied while
// it was read folded in (replay, in order); s.mu is held.
func (o *observing) handListings(replay []veil.PushFrame) {
	for class, raw := range o.listed {
		o.observer.Listed(class, fold(raw, class, replay))
	}
	clear(o.listed)
}

// dropListings forgets the listings of a refresh cut short; s.mu is held.
func (o *observing) dropListings() {
	clear(o.listed)
}

// fold applies the frames of class to a listing: a deleted object leaves it, a created or
// updated one replaces or joins it.
func fold(raw []RawObject, class string, frames []veil.PushFrame) []RawObject {
	var at map[string]int
	for _, f := range frames {
		if classOf[f.Resource] != class {
			continue
		}
		if at == nil {
			raw = slices.Clone(raw)
			at = make(map[string]int, len(raw))
			for i, o := range raw {
				at[o.ID] = i
			}
		}
		i, ok := at[f.ID]
		switch {
		case f.Event == veil.PushDeleted && ok:
			raw[i] = RawObject{} // dropped below
			delete(at, f.ID)
		case f.Event == veil.PushDeleted:
		case ok:
			raw[i] = RawObject{ID: f.ID, JSON: f.Object}
		default:
			at[f.ID] = len(raw)
			raw = append(raw, RawObject{ID: f.ID, JSON: f.Object})
		}
	}
	if at == nil {
		return raw
	}
	return slices.DeleteFunc(raw, func(o RawObject) bool { return o.ID == "" })
}

// pushed hands an applied frame to the observer; s.mu is held.
func (o *observing) pushed(f veil.PushFrame) {
	if o.observer != nil {
		o.observer.Pushed(classOf[f.Resource], RawObject{ID: f.ID, JSON: f.Object}, f.Event == veil.PushDeleted)
	}
}
