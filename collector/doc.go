// Package collector holds the metric views of the store: the inventory families rendered once
// per snapshot of an inventory.Store, the task families counted from the tasks it sees
// finishing, and the API request metrics of each controller's client (as kube-state-metrics'
// generators beside its store).
//
// A view reads immutable inventory.Snapshots and never calls the platform API; a scrape only
// copies what a render wrote (exposition) or encodes the few live families. It imports
// inventory, veil, internal/exposition and internal/metricutil, never guest, forwarder, ha or
// the daemon.
//
// Each inventory family is declared once, as kube-state-metrics' FamilyGenerator (family,
// families.go): its Desc (name, HELP, type, label names) and series, which sets the value and
// label values an object (a VM, a node, a cluster, a datapool, a disk, an interface, a VM's
// last backup) has in it. A render adds each object's series; whether a pushed change changed a
// family is whether the series of the object's two versions differ (differ), so a VM push
// re-renders, or patches, only the families whose series of that VM changed, and nothing else
// says which fields a family reads. What the last render showed is its Set's
// (exposition.Set.Source: the snapshot rendered), not the view's.
//
// To add a label to a family, add its name to the family's Desc and its value to the set call
// of its series, in the same place (inventory_domains.go for the VM families,
// inventory_nodes.go, inventory_devices.go, inventory_metrics.go for the others): the render,
// the live path and what a change re-renders all follow. A family of a new kind of object is a
// []family[T] beside them; TestPatchedRenderIsARenderFromScratch covers a new field of the
// object types by itself, and a new type once it is added to its kinds.
package collector
