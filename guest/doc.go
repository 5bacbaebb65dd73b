// Package guest checks the guest agents of one controller's running VMs through the platform's
// read-only guest commands (an allowlist fixed in the code), within the controller's request
// budget, and exports what they answer as metrics rendered once per change.
//
// It owns the checker (Checker: scheduling, sweeps, the command allowlist), its families and
// its part of the status page's problems. It reads the VMs to check through a DomainSource
// (an inventory.Store is one) and imports inventory (for Problem and ScrapableIP), veil, config
// and internal/{exposition,metricutil,runstatus}; never collector, forwarder, ha or the daemon.
package guest
