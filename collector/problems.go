package collector

// This file answers the status page's first question, "what is wrong?": the objects of the
// cached inventory and guest checks that are not as they should be, by name. It reads only what
// the collectors already hold; nothing here calls the controller.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/common/model"

	"github.com/veil-exporter/veil-exporter/veil"
)

// Problem is one object that is not as it should be.
type Problem struct {
	Kind  string // node, datapool, nic, backup, guest, clock
	ID    string
	Name  string // verbose name; the id when it has none
	State string // what is wrong: the status, "failed", "not answering", "off by 5.2s"
	// Failure says it is a failure (red), not a state an operator may have chosen (a node in
	// SERVICE) or that is passing (an agent restarting).
	Failure bool
}

// ClockOffsetThreshold is the clock offset past which a guest's clock counts as a problem: the
// alert VeilGuestClockOffset's threshold.
const ClockOffsetThreshold = 1.0 // seconds

// Problems lists the nodes and datapools that are not ACTIVE, the VMs' network interfaces whose
// link is down, the VMs whose newest finished backup failed and those without a successful
// backup within collect.backup_lookback, failures first, then by kind and name.
func (inv *Inventory) Problems() []Problem {
	inv.mu.RLock()
	snap := inv.snap
	inv.mu.RUnlock()
	var out []Problem
	for _, n := range snap.nodes {
		if n.Status != "ACTIVE" {
			out = append(out, Problem{Kind: "node", ID: n.ID, Name: nameOr(n.VerboseName, n.ID), State: n.Status, Failure: objectFailed(n.Status)})
		}
	}
	for _, p := range snap.datapools {
		if p.Status != "ACTIVE" {
			out = append(out, Problem{Kind: "datapool", ID: p.ID, Name: nameOr(p.VerboseName, p.ID), State: p.Status, Failure: objectFailed(p.Status)})
		}
	}
	names := make(map[string]string, len(snap.domains))
	for i := range snap.domains {
		names[snap.domains[i].ID] = snap.domains[i].VerboseName
	}
	for i := range snap.interfaces {
		// A link set down: listed, not a failure (an operator may have set it so). Interfaces of
		// VMs not exported (domain_include/exclude, or gone since the lists were read) are not.
		r := snap.interfaces[i].withDetail(snap.details)
		if vm, ok := names[r.domainID]; ok && r.up == 0 {
			out = append(out, Problem{Kind: "nic", ID: r.id, Name: nameOr(vm, r.domainID) + " " + nameOr(r.name, r.mac), State: "link down"})
		}
	}
	if snap.taskCounts != nil {
		backups := inv.backups.of(snap.domains)
		for _, b := range backups {
			if !b.succeeded {
				out = append(out, Problem{Kind: "backup", ID: b.id, Name: nameOr(names[b.id], b.id), State: "newest backup failed", Failure: true})
			}
		}
		out = append(out, notBackedUp(snap.domains, backups, inv.backups.lookback, time.Now())...)
	}
	SortProblems(out)
	return out
}

// NoBackupTag marks a VM that needs no backup: it is not listed as lacking one (the alert
// VeilVMNotBackedUp leaves it out too).
const NoBackupTag = "no-backup"

// notBackedUp lists the VMs (not templates, not tagged NoBackupTag) without a successful backup
// within lookback (0: since the exporter started) before now, as the alert VeilVMNotBackedUp
// does: only where backups are in use (some VM has one in the journal), and not those whose
// newest backup failed, which are listed as such. Not failures: an operator may have chosen not
// to back a VM up, and dozens of them must not push failed nodes out of the list.
func notBackedUp(doms []veil.Domain, backups []domainBackup, lookback time.Duration, now time.Time) []Problem {
	if len(backups) == 0 {
		return nil
	}
	var cutoff time.Time
	if lookback > 0 {
		cutoff = now.Add(-lookback)
	}
	covered := make(map[string]bool, len(backups))
	for _, b := range backups {
		covered[b.id] = !b.succeeded || !b.success.IsZero() && b.success.After(cutoff)
	}
	state := "no successful backup since the exporter started"
	if lookback > 0 {
		within := model.Duration(lookback).String()
		if lookback%(24*time.Hour) == 0 {
			within = fmt.Sprintf("%dd", lookback/(24*time.Hour)) // 7d as configured, not 1w
		}
		state = "no successful backup within " + within
	}
	var out []Problem
	for i := range doms {
		d := &doms[i]
		if d.Template || covered[d.ID] || slices.ContainsFunc(d.Tags, func(t veil.Tag) bool { return t.Name == NoBackupTag }) {
			continue
		}
		out = append(out, Problem{Kind: "backup", ID: d.ID, Name: nameOr(d.VerboseName, d.ID), State: state})
	}
	return out
}

// objectFailed tells a failure (FAILED, ERROR, BROKEN, ...) from a state an operator chose or
// that passes (SERVICE, CREATING, DELETING, ...).
func objectFailed(status string) bool {
	switch status {
	case "SERVICE", "CREATING", "DELETING", "PARTIAL", "":
		return false
	}
	return true
}

// Problems lists the checked guests that do not answer guest-ping and those whose clock is off
// by more than ClockOffsetThreshold, by name. While the controller fails guest commands (the
// collector "guest" failing) every ping fails at once and says nothing of the guests: they are
// not listed then, as the alert VeilGuestAgentNotAnswering holds back; the status page shows the
// controller's error instead.
func (g *GuestChecker) Problems() []Problem {
	inv := g.snapshot()
	names := make(map[string]string, len(inv.doms))
	for i := range inv.doms {
		names[inv.doms[i].ID] = inv.doms[i].VerboseName
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, _ := g.coverage(inv)
	controllerOK := g.sweepOK()
	var out []Problem
	for _, id := range eligible {
		v, ok := g.vms[id]
		if !ok || !v.pinged {
			continue
		}
		switch {
		case !v.pingOK && controllerOK:
			out = append(out, Problem{Kind: "guest", ID: id, Name: nameOr(names[id], id), State: "not answering guest-ping", Failure: true})
		case v.hasClock && math.Abs(v.clock) > ClockOffsetThreshold:
			out = append(out, Problem{Kind: "clock", ID: id, Name: nameOr(names[id], id), State: fmt.Sprintf("clock off by %+.1fs", v.clock), Failure: true})
		}
	}
	SortProblems(out)
	return out
}

// SortProblems orders problems failures first, then by kind and name.
func SortProblems(ps []Problem) {
	slices.SortFunc(ps, func(a, b Problem) int {
		if a.Failure != b.Failure {
			if a.Failure {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}

func nameOr(name, id string) string {
	if name != "" {
		return name
	}
	return id
}
