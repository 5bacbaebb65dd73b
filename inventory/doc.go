// Package inventory is the store of one controller (as client-go's informer store): what the
// exporter holds of its nodes, clusters, datapools, domains, tasks, disks, interfaces and
// version, listed at each refresh and kept fresh between them by the push channel (PushFeed),
// completed by the device detail sweep.
//
// Readers take an immutable Snapshot (Store.Snapshot) with a generation and a Changed signal:
// the metric views (collector), service discovery, the problems list, the status page and the
// change feed (an Observer) never wait for the controller. A Store reports its refreshes'
// run status and the tasks it sees finishing (a TaskObserver); it renders nothing.
//
// The Store is a small core (the snapshot and the locks, Run, which collections a refresh reads,
// Apply) with parts that have names, each in its own file: the push channel's pacing and the
// replay of a listing (pushPacing), the refresh record and the controller's outage
// (refreshRecord), the observer side (observing), the names book for the task kinds (nameBook),
// domain_include/exclude (domainFilter) and the device detail sweep (deviceSweep). The parts
// that change with the snapshot are guarded by its lock, Store.mu.
//
// It imports veil, config and internal/runstatus (and client_golang for the push channel's own
// counters), never collector, guest, forwarder, changefeed, ha or the daemon.
package inventory
