// This file holds what observes the coordinator: the observer (failures to reach the bucket,
// lease transitions, lapses) and what it shows, the status page's view of who owns which
// controller and the veil_ha_* metrics.

package ha

import (
	"sort"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/runstatus"
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

// observer keeps what the coordinator's parts report for the status page, the metrics and the
// log: the last failure to reach the bucket, the transitions and lapses of each lease.
type observer struct {
	bucket      string
	mu          sync.Mutex
	lastErr     string
	transitions map[string]uint64
	lapses      map[string]uint64 // leases that ran out before a renewal was answered (lapse.go)
	lastLapse   time.Time
	outage      runstatus.Outage // logs a run of failures to reach the bucket
	lapse       runstatus.Outage // logs a run of lapses
	descs       descs
}

func newObserver(logger log.Logger, bucket string) *observer {
	o := &observer{bucket: bucket, transitions: map[string]uint64{}, lapses: map[string]uint64{}, descs: newDescs()}
	o.outage.Logger = logger
	o.lapse.Logger, o.lapse.Remind = logger, lapseRemind
	return o
}

// fail reports a failure to reach the bucket: shown until the bucket answers, logged once per run.
func (o *observer) fail(what string, err error) {
	o.mu.Lock()
	o.lastErr = what + ": " + err.Error()
	o.mu.Unlock()
	if !o.outage.Fail(time.Now(), level.Warn, what+"; retrying every lease_ttl/3", err, "bucket", o.bucket) {
		level.Debug(o.outage.Logger).Log("msg", what, "err", err)
	}
}

// reachable reports that the bucket answered an announcement.
func (o *observer) reachable(now time.Time) {
	o.mu.Lock()
	o.lastErr = ""
	o.mu.Unlock()
	o.outage.Recover(now, "lease bucket reachable again", "bucket", o.bucket)
}

// transition counts an acquisition or a release of controller's lease.
func (o *observer) transition(controller string) {
	o.mu.Lock()
	o.transitions[controller]++
	o.mu.Unlock()
}

// Status is a snapshot for the status page.
func (c *Coordinator) Status() Status {
	now := time.Now()
	c.obs.mu.Lock()
	lastErr := c.obs.lastErr
	c.obs.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &c.table
	s := Status{Instance: t.self, Bucket: c.opts.Bucket, LeaseTTL: t.ttl, Synced: t.view.synced, LastError: lastErr}
	live := t.view.liveInstances(now, t.ttl)
	s.Instances = append(s.Instances, InstanceStatus{ID: t.self, Started: c.started, Self: true})
	for id, r := range live {
		if id != t.self {
			s.Instances = append(s.Instances, InstanceStatus{ID: id, Started: r.Started})
		}
	}
	sort.Slice(s.Instances, func(i, j int) bool { return s.Instances[i].ID < s.Instances[j].ID })
	for _, ct := range t.controllers {
		cs := ControllerStatus{Controller: ct}
		if l := c.leases[ct]; l != nil && l.Valid() {
			cs.Owner, cs.Since, cs.Mine = t.self, l.since, true
		} else if st := t.view.lease(leaseKey(ct), now, t.ttl); !st.free && st.holder != t.self {
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
	ch <- c.obs.descs.leader
	ch <- c.obs.descs.transitions
	ch <- c.obs.descs.lapses
	ch <- c.obs.descs.instances
}

// Collect implements prometheus.Collector: one veil_ha_leader and transitions series per
// configured controller, and the number of live replicas.
func (c *Coordinator) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	type row struct {
		name   string
		leader float64
		trans  uint64
		lapses uint64
	}
	c.mu.Lock()
	t := &c.table
	rows := make([]row, 0, len(t.controllers))
	for _, ct := range t.controllers {
		r := row{name: ct}
		if l := c.leases[ct]; l != nil && l.Valid() {
			r.leader = 1
		}
		rows = append(rows, r)
	}
	live := t.view.liveInstances(now, t.ttl)
	live[t.self] = nil
	c.mu.Unlock()
	c.obs.mu.Lock()
	for i := range rows {
		rows[i].trans, rows[i].lapses = c.obs.transitions[rows[i].name], c.obs.lapses[rows[i].name]
	}
	c.obs.mu.Unlock()
	d := c.obs.descs
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(d.leader, prometheus.GaugeValue, r.leader, r.name)
		ch <- prometheus.MustNewConstMetric(d.transitions, prometheus.CounterValue, float64(r.trans), r.name)
		ch <- prometheus.MustNewConstMetric(d.lapses, prometheus.CounterValue, float64(r.lapses), r.name)
	}
	ch <- prometheus.MustNewConstMetric(d.instances, prometheus.GaugeValue, float64(len(live)))
}
