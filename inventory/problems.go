package inventory

// The status page's first question, "what is wrong?": the objects of a snapshot that are not as
// they should be, by name. The guest checks add theirs (guest.Checker.Problems); nothing here
// calls the controller.

import (
	"cmp"
	"fmt"
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

// Problems lists the nodes and datapools that are not ACTIVE, the VMs' network interfaces whose
// link is down, the VMs whose newest finished backup failed and those without a successful
// backup within collect.backup_lookback before now, failures first, then by kind and name.
func (snap *Snapshot) Problems(now time.Time) []Problem {
	var out []Problem
	for _, n := range snap.Nodes {
		if n.Status != "ACTIVE" {
			out = append(out, Problem{Kind: "node", ID: n.ID, Name: NameOr(n.VerboseName, n.ID), State: n.Status, Failure: objectFailed(n.Status)})
		}
	}
	for _, p := range snap.Datapools {
		if p.Status != "ACTIVE" {
			out = append(out, Problem{Kind: "datapool", ID: p.ID, Name: NameOr(p.VerboseName, p.ID), State: p.Status, Failure: objectFailed(p.Status)})
		}
	}
	names := make(map[string]string, snap.Domains.Len())
	for d := range snap.Domains.All() {
		names[d.ID] = d.VerboseName
	}
	for i := range snap.Interfaces {
		// A link set down: listed, not a failure (an operator may have set it so). Interfaces of
		// VMs not exported (domain_include/exclude, or gone since the lists were read) are not.
		r := snap.Interfaces[i].WithDetail(snap.Details)
		if vm, ok := names[r.DomainID]; ok && r.Up == 0 {
			out = append(out, Problem{Kind: "nic", ID: r.ID, Name: NameOr(vm, r.DomainID) + " " + NameOr(r.Name, r.MAC), State: "link down"})
		}
	}
	if snap.TaskCounts != nil {
		backups := snap.Backups()
		for _, b := range backups {
			if !b.Succeeded {
				out = append(out, Problem{Kind: "backup", ID: b.ID, Name: NameOr(names[b.ID], b.ID), State: "newest backup failed", Failure: true})
			}
		}
		out = append(out, notBackedUp(snap.Domains, backups, snap.backupLookback, now)...)
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
func notBackedUp(doms VMs, backups []DomainBackup, lookback time.Duration, now time.Time) []Problem {
	if len(backups) == 0 {
		return nil
	}
	var cutoff time.Time
	if lookback > 0 {
		cutoff = now.Add(-lookback)
	}
	covered := make(map[string]bool, len(backups))
	for _, b := range backups {
		covered[b.ID] = !b.Succeeded || !b.Success.IsZero() && b.Success.After(cutoff)
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
	for d := range doms.All() {
		if d.Template || covered[d.ID] || slices.ContainsFunc(d.Tags, func(t veil.Tag) bool { return t.Name == NoBackupTag }) {
			continue
		}
		out = append(out, Problem{Kind: "backup", ID: d.ID, Name: NameOr(d.VerboseName, d.ID), State: state})
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

// NameOr is name, or id where the object has no name.
func NameOr(name, id string) string {
	if name != "" {
		return name
	}
	return id
}
