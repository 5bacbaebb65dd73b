// Package daemon is veil-exporter's supervisor: it builds, runs and reloads one set of
// controllers, each a list of components (inventory, push channel, inventory on NATS, guest
// checks, event forwarder), dials the NATS connection the components need, and shares the
// controllers with other replicas through package ha. One goroutine, Run's, owns its state.
// It serves its endpoints through internal/web, which it satisfies as web.Source.
//
// The Daemon is a small core (the running configuration, its controllers and NATS connection
// under one lock; Run, reloads and their rollback) with parts that have names: its life
// (lifecycle: started by Run, stopped by Stop), the builder of controllers (builder), what the
// last reload did (reloadRecord), the replicas' coordinator and its leases (replicas), and the
// web's view of it (webSource). A controller is a list of components with a small core and
// capabilities found once where a component is added (components.go).
//
// It may import the project's other packages (collector, forwarder, changefeed, natsconn, ha,
// config, veil, internal/...); only cmd/veil-exporter imports it.
package daemon
