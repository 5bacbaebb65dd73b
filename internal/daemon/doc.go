// Package daemon is veil-exporter's supervisor: it builds, runs and reloads one set of
// controllers, each a list of components (inventory, push channel, inventory on NATS, guest
// checks, event forwarder), dials the NATS connection the components need, and shares the
// controllers with other replicas through package ha. One goroutine, Run's, owns its state.
// It serves its endpoints through internal/web, which it satisfies as web.Source.
//
// It may import the project's other packages (collector, forwarder, changefeed, natsconn, ha,
// config, veil, internal/...); only cmd/veil-exporter imports it.
package daemon
