// Package collector holds the metric views of the store: the inventory families rendered once
// per snapshot of an inventory.Store, the task families counted from the tasks it sees
// finishing, and the API request metrics of each controller's client (as kube-state-metrics'
// generators beside its store).
//
// A view reads immutable inventory.Snapshots and never calls the platform API; a scrape only
// copies what a render wrote (exposition) or encodes the few live families. It imports
// inventory, veil, internal/exposition and internal/metricutil, never guest, forwarder, ha or
// the daemon.
package collector
