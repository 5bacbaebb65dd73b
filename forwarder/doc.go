// Package forwarder tails a controller's event journal (GET /api/events/, limit/offset paging
// over a list that changes while it is read) and publishes every event to NATS exactly once.
//
// Ordering: with events.order auto the forwarder asks for ordering=created (oldest first): pages
// can then be read concurrently by offset and lost events counted. It checks the order of what
// comes back from `created` and, should the platform ignore the parameter, tails newest first.
// The configured orders ask explicitly (created / -created).
//
// Owns event tailing, the position, publishing and the events stream's set-up on a connection
// (stream.go); the connection itself is natsconn's. A Forwarder is a small core (Run's loop,
// forwarder.go and cycle.go) over named parts: the position (position.go), the journal reader
// (tail.go, locate.go), the stream side it publishes through (streamside.go, pipeline.go,
// publish.go, streampos.go, checkpoint.go) and the observer that counts and reports what they do
// (observer.go, status.go, rejected.go). Imports veil, config, natsconn and
// internal/{metricutil,runstatus}, never collector or ha.
package forwarder
