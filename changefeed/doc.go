// Package changefeed writes the inventory of the controllers a replica runs to a JetStream KV
// bucket (default VEIL_INVENTORY): one key per node, cluster, datapool and VM,
// "<controller>.<class>.<id>", whose value is the object as the controller lists it (its JSON
// with object keys sorted, no field dropped). A subscriber follows the inventory with a KV watch.
//
// What is written, and what is not:
//   - Only a change is written: an object whose value is the one the bucket holds is never
//     written again, so a restart or a resync of 10,000 unchanged VMs writes nothing. Each write
//     carries Veil-Change (created, updated, deleted), Veil-Changed-Fields (for updates: the
//     top-level keys whose values changed, sorted, comma-separated) and Veil-Source (push: the
//     controller's push channel; refresh: a full listing).
//   - An object deleted on the controller is deleted in the bucket (a KV delete, so watchers see
//     a DEL): at once when the push says so, or when two listings in a row lack it (one listing
//     can miss an object that deletions before it shifted onto a page already read).
//   - The bucket is the position, as the stream is for events: at start and after every
//     reconnect the writer reads the controller's keys back (the values' hashes, not kept
//     values) and writes what differs from the next full listing (after a reconnect it asks
//     for one). So changes made
//     while no exporter ran are written at its first listing, and a NATS outage loses nothing
//     but intermediate states: what queued meanwhile is coalesced (a listing supersedes the
//     changes of its class before it) and written when NATS is back.
//   - Writes are fenced: each carries the revision the writer last saw of its key
//     (Nats-Expected-Last-Subject-Sequence), so a writer whose view is stale (another replica
//     wrote since) is refused, reads the bucket back and writes again only what still differs;
//     with replicas only the controller's lease holder runs a writer at all.
//
// Imports inventory (the observed objects), config and natsconn.
package changefeed
