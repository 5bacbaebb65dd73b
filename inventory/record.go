package inventory

// The refresh record (refreshRecord): how each collection's last read went (its run), how the
// last refresh went (when, how long, its error, whether the token was refused) and the
// controller's outage, logged when it starts, changes cause and ends; what the status page and
// the veil_collector_* families show of them. Guarded by Store.mu, but for the outage, which
// only a refresh uses (under Store.refreshMu).

import (
	"slices"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
)

// refreshRecord is the record of the refreshes and of the detail sweep.
type refreshRecord struct {
	runs         map[string]*collectionRun // of each enabled collection, and of the detail sweep where it runs
	authFailed   bool                      // the last refresh got 401/403: reload the token before the next
	lastAttempt  time.Time
	lastStart    time.Time // of the refresh running now, or of the last one
	lastDuration time.Duration
	lastError    string
	outage       runstatus.Outage // of the controller: down or rejecting the token
}

type collectionRun struct {
	success     bool
	duration    time.Duration
	lastSuccess time.Time
	err         string
	unavailable bool // the controller lacks the collection (404, 403, 405)
	skip        int  // refreshes left before an unavailable collection or the version is asked again
}

// skips says whether a refresh leaves collection name out: one the controller lacks, or the
// version, until its skip runs out; the version is read again at once after a refresh that
// failed (down: the controller may have been down for its upgrade).
func (rec *refreshRecord) skips(name string, down bool) bool {
	r := rec.runs[name]
	if name == collVersion && down {
		r.skip = 0
	}
	if (r.unavailable || name == collVersion) && r.skip > 0 {
		r.skip--
		return true
	}
	return false
}

// ended records a refresh that began at start and ended at finished; msg is its error for the
// status page, auth says the token was refused.
func (rec *refreshRecord) ended(start, finished time.Time, auth bool, msg string) {
	rec.authFailed = auth
	rec.lastAttempt = start
	rec.lastDuration = finished.Sub(start)
	rec.lastError = msg
}

// sweptDetails sets the detail sweep's run from what it read so far (since start: fails
// failures, the last lastErr).
func (rec *refreshRecord) sweptDetails(start time.Time, fails int, lastErr string) {
	r := rec.runs[collDetails]
	r.duration, r.success, r.err = time.Since(start), fails == 0, lastErr
	if fails == 0 {
		r.lastSuccess = time.Now()
	}
}

// fill sets the refresh's part of the status page's Status.
func (rec *refreshRecord) fill(st *Status) {
	st.AuthFailed = rec.authFailed
	st.LastAttempt, st.LastStart = rec.lastAttempt, rec.lastStart
	st.LastDuration, st.LastError = rec.lastDuration, rec.lastError
}

// runStatus is the last run of each of enabled, and of the detail sweep where it runs.
func (rec *refreshRecord) runStatus(enabled []string) []runstatus.Status {
	out := make([]runstatus.Status, 0, len(enabled)+1)
	names := enabled
	if rec.runs[collDetails] != nil {
		names = append(slices.Clip(names), collDetails)
	}
	for _, name := range names {
		r := rec.runs[name]
		out = append(out, runstatus.Status{
			Collector: name, Success: r.success, Duration: r.duration, LastSuccess: r.lastSuccess,
			Unavailable: r.unavailable, Error: r.err,
		})
	}
	return out
}
