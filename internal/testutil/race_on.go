//go:build race

package testutil

// Race says the tests run with the race detector: the daemon they start as a process is
// built with it too (Build).
const Race = true
