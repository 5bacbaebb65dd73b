package inventory

import (
	"testing"
	"time"
)

// shortPushPing pings a silent socket every d until the test ends (and after the feeds it
// started have stopped: cleanups run last first).
func shortPushPing(t *testing.T, d time.Duration) {
	was := pushPing
	t.Cleanup(func() { pushPing = was })
	pushPing = d
}

// shortPushBackoff waits d between push channel attempts until the test ends, a refused token
// included.
func shortPushBackoff(t *testing.T, d time.Duration) {
	first, most := pushBackoffFirst, pushBackoffMax
	t.Cleanup(func() { pushBackoffFirst, pushBackoffMax = first, most })
	pushBackoffFirst, pushBackoffMax = d, d
}
