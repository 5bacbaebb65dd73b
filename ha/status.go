// This file holds what the coordinator shows: the status page's view of who owns which
// controller, and the veil_ha_* metrics.

package ha

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Status is what the status page shows of high availability.
type Status struct {
	Instance  string
	Bucket    string
	LeaseTTL  time.Duration
	Synced    bool   // the bucket is open and its content was read
	LastError string // last failure talking to the bucket; empty once it answers again
	// Instances are the live replicas, this one included, sorted by id.
	Instances []InstanceStatus
	// Controllers are this replica's controllers, sorted, with their current owner.
	Controllers []ControllerStatus
}

// InstanceStatus is one live replica.
type InstanceStatus struct {
	ID      string
	Started time.Time // the replica's own wall clock
	Self    bool
}

// ControllerStatus says which replica runs a controller and since when.
type ControllerStatus struct {
	Controller string
	Owner      string    // instance id; empty while no replica holds a lease
	Since      time.Time // acquisition, on the owner's wall clock
	Mine       bool      // this replica runs it
}

// Status is a snapshot for the status page.
func (c *Coordinator) Status() Status {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Instance: c.opts.Instance, Bucket: c.opts.Bucket, LeaseTTL: c.ttl, Synced: c.view.synced, LastError: c.lastErr}
	live := c.view.liveInstances(now, c.ttl)
	s.Instances = append(s.Instances, InstanceStatus{ID: c.opts.Instance, Started: c.started, Self: true})
	for id, r := range live {
		if id != c.opts.Instance {
			s.Instances = append(s.Instances, InstanceStatus{ID: id, Started: r.Started})
		}
	}
	sort.Slice(s.Instances, func(i, j int) bool { return s.Instances[i].ID < s.Instances[j].ID })
	for _, ct := range c.controllers {
		cs := ControllerStatus{Controller: ct}
		if l := c.held[ct]; l != nil && l.Valid() {
			cs.Owner, cs.Since, cs.Mine = c.opts.Instance, l.since, true
		} else if st := c.view.lease(leaseKey(ct), now, c.ttl); !st.free && st.holder != c.opts.Instance {
			cs.Owner, cs.Since = st.holder, st.e.lease.Since
		}
		s.Controllers = append(s.Controllers, cs)
	}
	return s
}

type descs struct {
	leader, transitions, lapses, instances *prometheus.Desc
}

func newDescs() descs {
	return descs{
		leader: prometheus.NewDesc("veil_ha_leader",
			"1 if this replica holds the controller's lease and runs it, 0 if it does not (ha.enabled). Read at scrape time.",
			[]string{"controller"}, nil),
		transitions: prometheus.NewDesc("veil_ha_lease_transitions_total",
			"Times this replica acquired or gave up (handed over, released, lost) the controller's lease.",
			[]string{"controller"}, nil),
		lapses: prometheus.NewDesc("veil_ha_lease_expirations_total",
			"Times this replica's lease of the controller ran out before a renewal was answered (NATS or the replica too slow for ha.lease_ttl); each stops the controller here, and it starts again from scratch where it is acquired next.",
			[]string{"controller"}, nil),
		instances: prometheus.NewDesc("veil_ha_instances",
			"Live replicas in the lease bucket, this one included, as this replica's watch of the bucket saw them at scrape time.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Coordinator) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.descs.leader
	ch <- c.descs.transitions
	ch <- c.descs.lapses
	ch <- c.descs.instances
}

// Collect implements prometheus.Collector: one veil_ha_leader and transitions series per
// configured controller, and the number of live replicas.
func (c *Coordinator) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.mu.Lock()
	type row struct {
		name   string
		leader float64
		trans  uint64
		lapses uint64
	}
	rows := make([]row, 0, len(c.controllers))
	for _, ct := range c.controllers {
		r := row{name: ct, trans: c.transitions[ct], lapses: c.lapses[ct]}
		if l := c.held[ct]; l != nil && l.Valid() {
			r.leader = 1
		}
		rows = append(rows, r)
	}
	live := c.view.liveInstances(now, c.ttl)
	live[c.opts.Instance] = nil
	c.mu.Unlock()
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.descs.leader, prometheus.GaugeValue, r.leader, r.name)
		ch <- prometheus.MustNewConstMetric(c.descs.transitions, prometheus.CounterValue, float64(r.trans), r.name)
		ch <- prometheus.MustNewConstMetric(c.descs.lapses, prometheus.CounterValue, float64(r.lapses), r.name)
	}
	ch <- prometheus.MustNewConstMetric(c.descs.instances, prometheus.GaugeValue, float64(len(live)))
}
