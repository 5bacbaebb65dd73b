package inventory

// How each collection is read, and how its result is stored in the next snapshot.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// collect reads one collection and returns how to store it in the snapshot; the returned
// function runs with s.mu held. start is when the refresh began.
func (s *Store) collect(ctx context.Context, name string, start time.Time) (func(*Snapshot), error) {
	switch name {
	case collNodes:
		v, raw, err := list(ctx, s, "/api/nodes/", s.client.Nodes)
		return func(n *Snapshot) {
			n.Nodes = refs(v)
			for i := range v {
				s.names.learn(start, v[i].ID, v[i].VerboseName)
			}
			s.observing.keepListing(ClassNode, raw)
		}, err
	case collClusters:
		v, raw, err := list(ctx, s, "/api/clusters/", s.client.Clusters)
		return func(n *Snapshot) {
			n.Clusters = v
			for i := range v {
				s.names.learn(start, v[i].ID, v[i].VerboseName)
			}
			s.observing.keepListing(ClassCluster, raw)
		}, err
	case collDatapools:
		v, raw, err := list(ctx, s, "/api/data-pools/", s.client.Datapools)
		return func(n *Snapshot) {
			n.Datapools = v
			for i := range v {
				s.names.learn(start, v[i].ID, v[i].VerboseName)
			}
			s.observing.keepListing(ClassDatapool, raw)
		}, err
	case collDomains:
		v, raw, err := list(ctx, s, "/api/domains/", func(ctx context.Context) ([]veil.Domain, error) { return s.client.Domains(ctx, nil) })
		if err != nil {
			return nil, err
		}
		filtered := s.filter.domains(v)
		// By id: every VM family is then written in client_golang's order as it is emitted, and
		// a render sorts none of them.
		sortDomains(filtered)
		return func(n *Snapshot) {
			s.observing.keepListing(ClassDomain, raw)
			n.Domains, n.DomainsTotal = NewVMs(refs(filtered)), len(v)
			n.DomainsGen++
			present := make(map[string]bool, len(v))
			for i := range v {
				// Every VM, filtered out or not: its name must not reach a task kind either.
				s.names.learn(start, v[i].ID, v[i].VerboseName)
				present[v[i].ID] = true
			}
			s.backups.forget(present, start)
		}, nil
	case collVdisks:
		v, err := s.client.Vdisks(ctx, nil)
		if err != nil {
			return nil, err
		}
		rows, pools := s.filter.vdiskRows(v)
		return func(n *Snapshot) { n.Vdisks, n.PoolProvisioned = rows, pools }, nil
	case collInterfaces:
		v, err := s.client.VMachineInfs(ctx, nil)
		if err != nil {
			return nil, err
		}
		rows := s.filter.ifaceRows(v)
		return func(n *Snapshot) { n.Interfaces = rows }, nil
	case collVersion:
		v, err := s.client.ControllerVersion(ctx)
		return func(n *Snapshot) { n.Version = v }, err
	case collTasks:
		read, err := s.tasks.refresh(ctx, s.client)
		return func(n *Snapshot) {
			n.TaskCounts = read.counts
			s.tasks.record(read.fresh, s.names.nameOf)
			s.backups.observe(time.Now(), read.fresh)
		}, err
	}
	return nil, fmt.Errorf("unknown collection %q", name)
}

// sortDomains sorts domains by id. An index is sorted and the domains then moved into place, each
// once: a Domain is over 500 bytes, and sorting them in place moved 10,000 of them many times
// over at every refresh.
func sortDomains(ds []veil.Domain) {
	if slices.IsSortedFunc(ds, func(a, b veil.Domain) int { return strings.Compare(a.ID, b.ID) }) {
		return
	}
	order := make([]int32, len(ds))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(ds[a].ID, ds[b].ID) })
	// ds[i] is to hold the domain at order[i]: follow each cycle of the permutation once.
	for i := range order {
		if order[i] < 0 {
			continue
		}
		tmp, j := ds[i], i
		for {
			k := int(order[j])
			order[j] = -1
			if k == i {
				ds[j] = tmp
				break
			}
			ds[j] = ds[k]
			j = k
		}
	}
}
