// Package collector turns a platform controller's inventory into Prometheus metrics.
//
// Collection runs in the background (Inventory.Run); a scrape only turns the latest snapshot
// into const metrics, so /metrics never calls the platform API and deleted objects disappear
// by themselves at the next refresh.
//
// Owns the inventory, guest check and task collectors and their scheduling; imports veil,
// config and internal/{metricutil,runstatus}, never forwarder, ha or the daemon.
package collector
