// Package daemon is veil-exporter's heart: it builds, runs and reloads one set of controllers
// (inventory, guest checks, event forwarding), shares them with other replicas through package
// ha, and serves the HTTP endpoints. One goroutine, Run's, owns its state.
// It may import the project's other packages (collector, forwarder, natsconn, ha, config, veil,
// internal/...); only cmd/veil-exporter imports it.
package daemon
