// Package codeshape holds only a test: the module's shape rules (no Go file over 600 lines, no
// function over 80, no comment citing "issue N"), checked over every .go file of the module; no
// function of the packages in signatureScope with more than 5 parameters or 3 results; and the
// types of typeLimits (forwarder.Forwarder, ha.Coordinator, guest.Checker, daemon.Daemon,
// inventory.Store: 20 fields, 25 methods each) no larger than their limits.
package codeshape
