package veiltest

// This file holds the record of the changes the simulator makes to its objects. One function,
// changed, is called wherever a node, datapool, VM or task changes; the loop renders each change
// as the object's collection lists it (listForm) and hands it to the change log
// (Options.ChangeLog) and to the sockets of the push channel subscribed to its resource
// (push.go). Nothing is recorded while nobody keeps or listens: a large inventory with background
// activity and no push client pays one comparison per change.

import (
	"encoding/json"
	"strings"
	"time"
)

// The events of a Change, as the push channel names them.
const (
	ChangeCreated = "CREATED"
	ChangeUpdated = "UPDATED"
	ChangeDeleted = "DELETED"
)

// pushResources are the resources of the push channel, as clients name them in "add <resource>".
// Nothing in the simulator changes a resource pool, so /resource_pools/ never sends data.
var pushResources = []string{"/domains/", "/nodes/", "/clusters/", "/data-pools/", "/resource_pools/", "/tasks/"}

// Change is one change the simulator made to an object, as the change log keeps it.
type Change struct {
	Seq      uint64          `json:"seq"`      // from 1, in the order the changes were made
	Resource string          `json:"resource"` // "/domains/", "/nodes/", "/clusters/", "/data-pools/", "/tasks/"
	Event    string          `json:"event"`    // ChangeCreated, ChangeUpdated or ChangeDeleted
	ID       string          `json:"id"`
	Time     time.Time       `json:"time"`   // when it was made, by Options.Now
	Object   json.RawMessage `json:"object"` // the object as its collection lists it (English texts)
}

// feed collects the changes of the state; every field is guarded by Server.mu.
type feed struct {
	live bool // off while the seeded inventory is built: that is no change

	pending   []pendingChange
	pendingAt map[string]int // object id → its CREATED or UPDATED in pending
	kick      chan struct{}  // the loop flushes pending when it receives

	seq     uint64
	ring    []Change // the change log: the last len(ring) changes, cap Options.ChangeLog
	next    int
	logSize int

	subs    map[string]int // per resource, how many sockets are subscribed
	sockets map[*pushSocket]bool
	closed  bool // the server is closing: no new socket
}

// pendingChange is a change not rendered yet: changes made under one lock are rendered once the
// lock is released, so an object changed twice is rendered once, as it ended.
type pendingChange struct {
	res, event, id string
	obj            any
	at             time.Time
}

func (f *feed) init(logSize int) {
	f.pendingAt = map[string]int{}
	f.kick = make(chan struct{}, 1)
	f.logSize = max(logSize, 0)
	f.subs = map[string]int{}
	f.sockets = map[*pushSocket]bool{}
}

// wants reports whether a change of res is recorded: the change log is on or a socket listens.
func (f *feed) wants(res string) bool { return f.live && (f.logSize > 0 || f.subs[res] > 0) }

// changed records that obj (a *domain, *node, *cluster, *datapool or *task) was created, updated
// or deleted. It is the one place a change goes through: it also drops the VM's cached list form.
func (st *state) changed(event string, obj any) {
	var res, id string
	switch o := obj.(type) {
	case *domain:
		o.listJSON = nil
		res, id = "/domains/", o.id
	case *node:
		res, id = "/nodes/", o.id
	case *cluster:
		res, id = "/clusters/", o.id
	case *datapool:
		res, id = "/data-pools/", o.id
	case *task:
		res, id = "/tasks/", o.id
	default:
		panic("veiltest: changed of an unknown object")
	}
	f := &st.feed
	if !f.wants(res) {
		return
	}
	if _, ok := f.pendingAt[id]; ok && event == ChangeUpdated {
		return // rendered once at the flush, as it is then
	}
	if event == ChangeDeleted {
		delete(f.pendingAt, id)
	} else {
		f.pendingAt[id] = len(f.pending)
	}
	f.pending = append(f.pending, pendingChange{res: res, event: event, id: id, obj: obj, at: st.opts.Now()})
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// listForm is obj as its collection's list renders it, by the functions the list endpoints call
// (api_collections.go): the VM's cached list bytes, the task's in English, the others' wire form.
func (st *state) listForm(obj any, now time.Time) []byte {
	var v any
	switch o := obj.(type) {
	case *domain:
		return o.listBytes()
	case *task:
		return st.taskBytes(o, now, langEN)
	case *node:
		v = o.wire()
	case *cluster:
		v = st.clusterWire(o, false)
	case *datapool:
		v = st.poolWire(o)
	}
	b, _ := json.Marshal(v)
	return b
}

// flushChanges renders the pending changes in the order they were made, keeps them in the change
// log and queues them on the subscribed sockets. It runs under s.mu.
func (s *Server) flushChanges() {
	f := &s.st.feed
	if len(f.pending) == 0 {
		return
	}
	now := s.now()
	odd := s.oddFields()
	for i, p := range f.pending {
		f.seq++
		c := Change{Seq: f.seq, Resource: p.res, Event: p.event, ID: p.id, Time: p.at, Object: s.st.listForm(p.obj, now)}
		if odd != nil {
			c.Object = odd.patchObject(strings.Trim(p.res, "/"), c.Object)
		}
		if f.logSize > 0 {
			if len(f.ring) < f.logSize {
				f.ring = append(f.ring, c)
			} else {
				f.ring[f.next] = c
				f.next = (f.next + 1) % f.logSize
			}
		}
		if f.subs[p.res] > 0 {
			s.pushData(c)
		}
		f.pending[i] = pendingChange{}
	}
	f.pending = f.pending[:0]
	clear(f.pendingAt)
}

// Changes returns the changes the simulator made after change number since, oldest first: every
// creation, update and deletion of a node, cluster, datapool, VM or task, with the object as its
// collection lists it. It keeps the last Options.ChangeLog changes (none when 0); a first Seq
// above since+1 means older ones were dropped.
func (s *Server) Changes(since uint64) []Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushChanges()
	f := &s.st.feed
	out := []Change{}
	for i := range f.ring {
		if c := f.ring[(f.next+i)%len(f.ring)]; c.Seq > since {
			out = append(out, c)
		}
	}
	return out
}
