// Package metricutil holds the value conversions the exporter's const metrics share.
//
// Imports nothing of this module; collector, forwarder and the daemon import it.
package metricutil

import "time"

// Bool is 1 for true and 0 for false.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// UnixSeconds is t as Unix seconds with a fraction, or 0 for the zero time (never happened).
func UnixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
