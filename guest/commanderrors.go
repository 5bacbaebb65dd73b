package guest

// The guest checker's failed commands (commandErrors): the counts of
// veil_guest_command_errors_total by command and reason, and the last failure, which the status
// page shows. Guarded by Checker.mu, like the VMs whose calls failed.

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/veil"
)

type guestErrKey struct{ command, reason string }

// commandErrors counts failed guest commands and keeps the last.
type commandErrors struct {
	counts map[guestErrKey]float64
	last   string // the last failure: "command on id: reason"
	// the last failure apart: VM id, command, reason
	lastID, lastCmd, lastReason string
}

// add counts a failed call and returns its text ("command on id: reason").
func (e *commandErrors) add(id, cmd, reason string) string {
	if e.counts == nil {
		e.counts = map[guestErrKey]float64{}
	}
	e.counts[guestErrKey{cmd, reason}]++
	e.last = fmt.Sprintf("%s on %s: %s", cmd, id, reason)
	e.lastID, e.lastCmd, e.lastReason = id, cmd, reason
	return e.last
}

// status fills st's last error, naming the VM as inv's domains do (its id when they give no
// name).
func (e *commandErrors) status(st *Status, inv guestInventory) {
	st.LastError = e.last
	if e.lastID == "" {
		return
	}
	name := e.lastID
	for i := range inv.doms {
		if inv.doms[i].ID == e.lastID && inv.doms[i].VerboseName != "" {
			name = inv.doms[i].VerboseName
			break
		}
	}
	st.LastErrorDomain, st.LastErrorDomainID, st.LastErrorCommand, st.LastErrorReason = name, e.lastID, e.lastCmd, e.lastReason
	st.LastIsState = e.lastReason == "agent_not_running" || e.lastReason == "not_supported"
	st.LastError = fmt.Sprintf("%s on %s (%s): %s", e.lastCmd, name, e.lastID, e.lastReason)
}

// collect sends the counts as desc (veil_guest_command_errors_total).
func (e *commandErrors) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc) {
	for k, n := range e.counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, n, k.command, k.reason)
	}
}

// guestControllerFailure tells failures of the controller (5xx, no answer, bad token, bad
// body) from refusals about one VM (400: not running, Linux only), which are no reason to
// report the collector as failing.
func guestControllerFailure(reason string, err error) bool {
	if reason != "api_error" {
		return false
	}
	var ae *veil.APIError
	if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 &&
		ae.StatusCode != 401 && ae.StatusCode != 403 {
		return false
	}
	return true
}
