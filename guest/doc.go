// Package guest checks the guest agents of one controller's running VMs through the platform's
// read-only guest commands (an allowlist fixed in the code), within the controller's request
// budget, and exports what they answer as metrics rendered once per change.
//
// It owns the checker, its families and its part of the status page's problems. The Checker is a
// small core (the VMs under one lock, the workers and the dispatcher, one visit of a VM) with
// parts that have names: the inventory as followed (snapshots), when each VM is visited
// (schedule), the calls to the guests through the read-only allowlist (guestCommands), full ping
// sweeps and the run status (guestSweep), the failed commands (commandErrors). It reads the VMs
// to check through a DomainSource (an inventory.Store is one) and imports inventory (for Problem
// and ScrapableIP), veil, config and internal/{exposition,metricutil,runstatus}; never
// collector, forwarder, ha or the daemon.
package guest
