// Package runstatus is the small report every background component of a controller (inventory
// collections, the guest checker, the event forwarder) gives of its last run. The daemon turns
// these reports into the veil_collector_* families in one place, so no component imports another
// for metrics plumbing (as node_exporter's collector.go does for its collectors). Outage is the
// one policy for logging a run of failures (first, reminders, recovery) that every background
// activity follows: the inventory, the guest sweep, the forwarder, the NATS connection and ha.
//
// Imports nothing of this module; collector, forwarder, natsconn, ha and the daemon import it.
package runstatus

import "time"

// Status is the last run of one collector of one controller.
type Status struct {
	Collector   string        // nodes, clusters, datapools, domains, tasks, vdisks, interfaces, version, guest, events
	Success     bool          // the last run succeeded
	Duration    time.Duration // of the last run
	LastSuccess time.Time     // zero if it never succeeded
	// Unavailable says the controller lacks this collection (it answered 404, 403 or 405):
	// not an outage, retried at a slower pace. Success is false then.
	Unavailable bool
	Error       string // the last run's error, redacted; "" after a success
}

// Reporter is what the daemon asks of each component.
type Reporter interface {
	RunStatus() []Status
}
