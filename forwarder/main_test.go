package forwarder

// The tests' process: most tests follow the position event by event, as a reader whose events
// may not appear late (settle 0) moves it; the property test and the settle tests set the
// reader's settle time to settleTime themselves, and the end-to-end suite runs the daemon's.

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	defaultSettle = 0
	os.Exit(m.Run())
}
