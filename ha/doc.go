// Package ha lets replicas of veil-exporter share the controllers of one configuration: each
// controller is run (inventory, guest checks, events) by exactly one live replica, the holder
// of its lease in a NATS JetStream key-value bucket, which a NATS cluster replicates with Raft.
// There is no protocol of our own: every decision is a compare-and-set on the bucket.
//
// # Bucket
//
// The bucket (Options.Bucket, created when absent with Options.Replicas, one value per key,
// keys dropped after ten lease times, at least a minute, without a write) holds
//
//	leases.<controller>   {instance, controller, id, since, renewed, ttl}
//	instances.<instance>  {instance, nonce, started, renewed, controllers}
//
// A replica announces itself every lease_ttl/3 (Put on its instances key) and renews each lease
// it holds as often with Update at the revision it last wrote, on a goroutine of its own (the
// renewer): nothing the coordinator's loop waits for (acquisitions, hand-overs, a bucket that
// answers slowly on a busy machine) delays a renewal, and a failed renewal is tried again
// within lease_ttl/12. It acquires a controller with
// Create when the key is absent, Update at the delete marker's revision when it is deleted (a
// Create there reads the key first, and a bucket replica behind the delete answers "key
// exists"), or Update at the revision it saw when that revision has not changed for lease_ttl. Expiry is judged on the observer's monotonic clock
// from when it first saw a revision, never on timestamps written by another host, so clock
// skew between replicas does not matter.
//
// # Who owns what
//
// The desired owner of a controller is chosen by rendezvous hashing over the live instances
// that announce it (live: record changed within lease_ttl), bounded so that the counts differ
// by at most one, and sticky: a live holder keeps what it holds up to its share, what it has
// held longest first (see assignSince),
// so when a replica dies only its controllers move. A replica acquires free leases it is the
// desired owner of (in its first renew period after announcing itself only one handed to it,
// so that replicas started together each take their share), or any free lease nobody took for
// a lease_ttl. It hands a controller over (stops it, then
// deletes the key at its revision) when another live instance is its desired owner: one
// controller at a time across all replicas (the one whose holder and name sort first), the next
// as soon as the last is taken, and only while no controller is without an owner; the
// mover first writes the hand-over record (one key, created or updated at its revision, so two
// replicas whose views differ for a moment cannot both hand over), and the receiver deletes it
// once it holds the controller. The replica the record names sees the lease's deletion through
// its watch and takes it within milliseconds; the others leave it to that replica while it is
// live, even when their own views make them its owner (the mover's view may not have had
// them yet).
// So a joining replica takes its share one controller at a time without gaps. Close (SIGTERM)
// stops every controller and deletes every lease at once, so they move in well under a second;
// a killed or paused replica's leases expire, and move within lease_ttl of its last renewal:
// nothing is written when a lease runs out, so each replica looks at the bucket again at the
// instant the next record it saw runs out, not at its next renew period (lease_ttl/3 later).
//
// # Fencing
//
// A Lease is valid until lease_ttl minus a margin (lease_ttl/5) after the last renewal was
// SENT, on the monotonic clock; its Context is cancelled then. Another replica acquires only
// after a full lease_ttl without a change it saw, which is after the write was sent, so the
// old holder has stopped before the new one starts, even if it was paused (SIGSTOP, a long GC,
// a partition): Linux's monotonic clock runs on while a process is stopped, so after SIGCONT
// Valid is false at once. A paused holder never renews over a new owner either: its Update at
// the old revision fails, and it lets the controller go. What an owner does outside this
// window is fenced by the stores themselves: the event position is written with
// compare-and-set (forwarder's nats_kv store), and events carry Nats-Msg-Id, so a message a
// stale owner still gets out is a duplicate JetStream drops.
//
// While no replica reaches NATS, leases cannot be renewed: every replica stops its controllers
// after lease_ttl and exports veil_ha_leader 0 until NATS is back. That is the price of never
// running a controller twice; a 3-node NATS cluster with bucket replicas 3 survives one node.
//
// # Parts
//
// The Coordinator (ha.go) is the daemon's handle and holds what its parts share: the options,
// Run's and Close's lifecycle, and under one mutex the lease table and the held Leases.
//
//   - table (table.go, with view.go and assign.go): the lease table and its rules, with no
//     I/O, no goroutine and no clock (instants are passed in): the bucket as this replica's
//     watch saw it, what this replica is configured with and holds, what it is letting go,
//     acquisitions whose reply was lost, when it joined, its last announcement; plan decides a
//     round at an instant (acquire, adopt, remove, the one hand-over, the next instant to look).
//     table_test.go tests it as a table of rows.
//   - loop (reconcile.go, release.go): Run's goroutine, the one that talks to the bucket for
//     the table: it asks the table for a round and carries it out (writes over the revisions
//     seen, the hand-over record, releases and their deletes), telling the table what came of
//     it; it runs the watch (watch.go: follows the bucket into the table's view, restarted when
//     it falls behind) and the renewer (renew.go: announcements and renewals, on a goroutine of
//     its own).
//   - Lease (lease.go): one held lease's fence, on this replica's monotonic clock.
//   - observer (status.go, lapse.go): failures to reach the bucket, transitions and lapses, as
//     the log, the status page (Status) and the veil_ha_* metrics say them.
//
// # Wiring it into the daemon
//
//	coord, err := ha.New(conn.NATS(), ha.Options{
//		Bucket: cfg.HA.Bucket, Replicas: cfg.HA.Replicas, LeaseTTL: cfg.HA.LeaseTTL,
//		Instance: cfg.HA.Instance, Controllers: names, Logger: logger,
//		OnAcquire: d.acquired, // starts the controller under l.Context() and returns
//		OnRelease: d.released, // cancels it; returns the wait until it has stopped
//	})
//	registry.MustRegister(coord)      // veil_ha_leader, veil_ha_lease_transitions_total, veil_ha_instances
//	go coord.Run(ctx)                 // retries while NATS is down; never exits on its own
//	coord.SetControllers(names)       // on every reload (a removed controller is released)
//	coord.Close()                     // on SIGTERM, before anything else stops: hand-over at once
//
// js is a jetstream.JetStream on a connection that reconnects forever (natsconn.Connect's
// options); the daemon needs one even with events off. OnAcquire and OnRelease are called from
// the coordinator's goroutine, one at a time, and must not block: OnAcquire starts goroutines
// and returns; OnRelease cancels and returns a wait that returns only once nothing runs for the
// controller any more. The coordinator waits for it on a goroutine of its own, so that renewals
// of the other leases go on, and deletes the lease for the next owner right after it returns. A controller
// this replica does not hold must export nothing but veil_ha_leader 0. A replica that holds
// nothing is healthy and ready: /-/healthy and /-/ready count only held controllers, and the
// status page shows Status().Controllers (owner and since) for all.
//
// For the forwarder: run it under l.Context(); check l.Held() right before each publish batch
// and right before saving the position, and wait (without saving) while it is false, until it
// is true again (a renewal regained a lease that ran out) or the context ends (Held, not
// Valid: a released lease stays held while its controller stops, so the last save goes
// through); the stream's expected-sequence fence refuses a stale owner's publish or save.
//
// Owns the leases and who runs what; imports of this module only internal/runstatus (how a run
// of failures is logged); the daemon hands it a NATS connection and its callbacks.
package ha
