package inventory

// The names book (nameBook): the names of the nodes, clusters, datapools and domains the
// inventory has listed or been pushed, kept an hour past their object's last sight, so that the
// task kinds replace an id by its name even for an object a task has just deleted. Guarded by
// Store.mu, as the snapshot whose listings fill it.

import "time"

// nameRetention keeps the name of an object gone from the inventory this long, so that the task
// deleting a VM, seen after the VM, still finds its name to replace.
const nameRetention = time.Hour

// nameBook is uuid -> name of the nodes, clusters, datapools and domains.
type nameBook map[string]knownName

// knownName is an object's name and when the inventory last listed it.
type knownName struct {
	name string
	seen time.Time
}

// learn records the name of an object just listed or pushed. Names of objects gone are kept for
// nameRetention, for the tasks that removed them.
func (b nameBook) learn(now time.Time, id, name string) {
	b[id] = knownName{name, now}
}

// learner is learn at now, for a pushed object.
func (b nameBook) learner(now time.Time) func(id, name string) {
	return func(id, name string) { b.learn(now, id, name) }
}

// forget drops names not listed for nameRetention.
func (b nameBook) forget(now time.Time) {
	for id, n := range b {
		if now.Sub(n.seen) > nameRetention {
			delete(b, id)
		}
	}
}

// nameOf looks up a name for the task kinds.
func (b nameBook) nameOf(id string) (string, bool) {
	n, ok := b[id]
	return n.name, ok
}
