// Observing the inventory: the objects of the pushed collections, as the controller lists or
// pushes them, handed to an Observer (the inventory on NATS) in the order the inventory learns
// them.

package collector

import (
	"context"
	"encoding/json"

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

// SetObserver makes o observe the inventory from its next listing; call it before Run.
func (inv *Inventory) SetObserver(o Observer) {
	inv.mu.Lock()
	inv.observer = o
	inv.mu.Unlock()
}

// list reads a collection with read, or, with an observer, keeping each object's bytes.
func list[T any](ctx context.Context, inv *Inventory, path string, read func(context.Context) ([]T, error)) ([]T, []RawObject, error) {
	inv.mu.RLock()
	observed := inv.observer != nil
	inv.mu.RUnlock()
	if !observed {
		v, err := read(ctx)
		return v, nil, err
	}
	rs, err := veil.ListAllRaw[T](ctx, inv.client, path)
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

// observeListed hands a listing to the observer; inv.mu is held. raw is nil without one.
func (inv *Inventory) observeListed(class string, raw []RawObject) {
	if inv.observer != nil && raw != nil {
		inv.observer.Listed(class, raw)
	}
}

// observePushed hands an applied frame to the observer; inv.mu is held.
func (inv *Inventory) observePushed(f veil.PushFrame) {
	if inv.observer != nil {
		inv.observer.Pushed(classOf[f.Resource], RawObject{ID: f.ID, JSON: f.Object}, f.Event == veil.PushDeleted)
	}
}
