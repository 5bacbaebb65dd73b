// Replicas (ha.enabled): the daemon runs a controller only while it holds the controller's lease,
// which package ha grants to one live replica at a time. This file is the wiring: the daemon's
// side of the coordinator (replicas), which controllers run and which wait, and what a reload
// may change.

package daemon

import (
	"errors"
	"reflect"
	"slices"
	"sync"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// replicasChange refuses a reload that switches replicas on or off, or changes the ha or nats
// sections while they are on: the leases live on that connection, and a new one would let go of
// every controller at once. A restart hands them over one by one.
func replicasChange(old, cfg *config.Config, conn *natsLink) error {
	if old == nil {
		return nil
	}
	switch {
	case old.HA.Enabled != cfg.HA.Enabled:
		return errors.New("ha.enabled changed: restart the exporter to switch replicas on or off")
	case !cfg.HA.Enabled:
		return nil
	case !reflect.DeepEqual(old.HA, cfg.HA):
		return errors.New("the ha section changed: with replicas it takes effect on a restart")
	case !reflect.DeepEqual(old.NATS, cfg.NATS) || conn != nil && conn.FilesChanged():
		return errors.New("the nats section or its files changed: with replicas it takes effect on a restart (the leases live on that connection)")
	}
	return nil
}

// split divides the controllers of a new configuration into those this replica runs and those
// it waits with. Without replicas all run. With them, a controller runs when it ran before the
// reload (kept) or replaces one that ran (rebuilt: it starts under that one's lease).
func split(cfg *config.Config, next, running []*controller) ([]*controller, map[string]*controller) {
	if !cfg.HA.Enabled {
		return next, nil
	}
	var run []*controller
	idle := map[string]*controller{}
	for _, ct := range next {
		i := slices.IndexFunc(running, func(r *controller) bool { return r.cfg.Name == ct.cfg.Name })
		switch {
		case slices.Contains(running, ct):
			run = append(run, ct)
		case ct.used:
			// A standby that ran before: its loops do not restart, the next acquisition rebuilds it.
			idle[ct.cfg.Name] = ct
		case i >= 0 && running[i].run != nil:
			// A held controller whose settings changed: it starts again under the same lease.
			ct.run = running[i].run
			run = append(run, ct)
		default:
			idle[ct.cfg.Name] = ct
		}
	}
	return run, idle
}

// controllerNames lists the controllers of cfg, for the coordinator.
func controllerNames(cfg *config.Config) []string {
	names := make([]string, 0, len(cfg.Controllers))
	for _, cc := range cfg.Controllers {
		names = append(names, cc.Name)
	}
	return names
}

// replicas is the daemon's side of the coordinator: the coordinator, the NATS connection it has
// to itself, and the leases it granted, which its callbacks (acquired, released) hand to Run's
// goroutine through the daemon's inbox.
type replicas struct {
	coord  *ha.Coordinator
	conn   *natsconn.Conn       // the coordinator's own (see startReplicas)
	leases map[string]*leaseRun // by controller; the coordinator's goroutine only (acquired, released)
	inbox  *inbox
	// stopping is called before a released controller's loops are waited for (the daemon's
	// beforeStop).
	stopping func(controller string)
}

// startReplicas builds the coordinator of the first configuration (ha.enabled cannot change on
// a reload); the caller runs it. Until it acquires a lease every controller waits.
//
// The coordinator has a NATS connection of its own: a client connection serialises its calls
// under one lock, and with hundreds of controllers writing their inventory and events on the
// daemon's connection a renewal waited there longer than a lease holds (500 controllers: every
// lease lapsed every 10 to 20 seconds). Its own connection reconnects forever, as the daemon's.
func (d *Daemon) startReplicas(cfg *config.Config) {
	conn, err := natsconn.Connect(cfg.NATS, log.With(d.base, "component", "nats", "for", "leases"))
	if err != nil {
		level.Error(d.logger).Log("msg", "couldn't start replicas", "err", err)
		return
	}
	r := &replicas{conn: conn, leases: map[string]*leaseRun{}, inbox: &d.inbox, stopping: func(name string) {
		if d.beforeStop != nil {
			d.beforeStop(name)
		}
	}}
	coord, err := ha.New(conn.NATS(), ha.Options{
		Bucket: cfg.HA.Bucket, Replicas: cfg.HA.Replicas, LeaseTTL: cfg.HA.LeaseTTL, Instance: cfg.HA.Instance,
		Controllers: controllerNames(cfg), Logger: d.base, // the package adds component=ha
		OnAcquire: r.acquired, OnRelease: r.released,
	})
	if err != nil {
		conn.Close()
		level.Error(d.logger).Log("msg", "couldn't start replicas", "err", err)
		return
	}
	r.coord = coord
	d.mu.Lock()
	d.replicas = r
	d.mu.Unlock()
	d.metrics.Live.MustRegister(coord)
	level.Info(d.logger).Log("msg", "replicas on: controllers run where their lease is held", "instance", coord.Instance(),
		"bucket", cfg.HA.Bucket, "lease_ttl", cfg.HA.LeaseTTL)
}

// acquired is the coordinator's OnAcquire: it hands the lease to Run's goroutine and returns
// at once, so that a reload in progress never delays the coordinator's renewals.
func (rs *replicas) acquired(l *ha.Lease) {
	r := &leaseRun{lease: l}
	rs.leases[l.Controller()] = r
	rs.inbox.post(func(d *Daemon) { d.startLeased(r) })
}

// released is the coordinator's OnRelease: it lets nothing more start under the lease (whose
// end has cancelled what runs under it) and returns the wait until its loops have ended (its
// forwarder has saved its position), which the coordinator does off its loop before the next
// owner can start; then Run's goroutine moves the controller to standby.
func (rs *replicas) released(name string) (stopped func()) {
	r := rs.leases[name]
	delete(rs.leases, name)
	if r == nil {
		return nil
	}
	return func() {
		rs.stopping(name)
		r.end()
		rs.inbox.post(func(d *Daemon) { d.stopLeased(name, r) })
	}
}

// close closes the coordinator, which returns once its Run has released every lease (the
// other replicas take them over at once), then its connection.
func (rs *replicas) close() {
	rs.coord.Close()
	rs.conn.Close()
}

// startLeased starts a standby controller under a lease the coordinator acquired.
func (d *Daemon) startLeased(r *leaseRun) {
	name := r.lease.Controller()
	ct := d.standby[name]
	if ct == nil {
		return // removed by a reload: the coordinator releases it
	}
	if ct.used {
		nct, err := d.builder.buildController(ct.settings, d.conn)
		if err != nil {
			// It built at the last reload; only a file gone since (ca_file) fails it now.
			level.Error(d.logger).Log("msg", "couldn't start an acquired controller", "controller", name, "err", err)
			return
		}
		ct = nct
	}
	if !r.start(ct, d.logger) {
		return // released before it could start
	}
	d.mu.Lock()
	delete(d.standby, name)
	d.controllers = inConfigOrder(d.cfg, append(slices.Clone(d.controllers), ct))
	d.mu.Unlock()
}

// stopLeased moves a controller whose lease was released (its loops have ended) to standby.
func (d *Daemon) stopLeased(name string, r *leaseRun) {
	i := slices.IndexFunc(d.controllers, func(ct *controller) bool { return ct.cfg.Name == name && ct.run == r })
	if i < 0 {
		return
	}
	ct := d.controllers[i]
	d.mu.Lock()
	d.controllers = slices.Delete(slices.Clone(d.controllers), i, i+1)
	if d.cfg != nil && hasController(d.cfg, name) {
		d.standby[name] = ct
	}
	d.mu.Unlock()
	ct.stop() // returns at once: released waited for its loops
}

// leaseRun is what runs under one lease: released waits for it without asking Run's goroutine,
// and nothing starts under it once it ended.
type leaseRun struct {
	lease *ha.Lease
	mu    sync.Mutex
	ended bool
	wg    sync.WaitGroup // one per controller started under the lease, until its loops end
}

// start runs ct under the lease; false when the lease ended first.
func (r *leaseRun) start(ct *controller, logger log.Logger) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.lease.Context().Err() != nil {
		return false
	}
	ct.run = r
	ct.lease.Store(r.lease)
	ct.start(r.lease.Context(), logger)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); ct.done.Wait() }()
	return true
}

// end lets nothing more start under the lease and waits for what runs under it; the lease's
// end has cancelled it.
func (r *leaseRun) end() {
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
	r.wg.Wait()
}

// inbox queues the coordinator's messages for Run's goroutine; posting never blocks.
type inbox struct {
	mu    sync.Mutex
	msgs  []func(*Daemon)
	ready chan struct{} // holds a signal while msgs is not empty
}

func newInbox() inbox { return inbox{ready: make(chan struct{}, 1)} }

func (b *inbox) post(m func(*Daemon)) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take empties the queue, oldest first.
func (b *inbox) take() []func(*Daemon) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs = nil
	return msgs
}

// inConfigOrder sorts ctrls as cfg lists them, so pages and expositions keep one order.
func inConfigOrder(cfg *config.Config, ctrls []*controller) []*controller {
	pos := map[string]int{}
	for i, cc := range cfg.Controllers {
		pos[cc.Name] = i
	}
	slices.SortStableFunc(ctrls, func(a, b *controller) int { return pos[a.cfg.Name] - pos[b.cfg.Name] })
	return ctrls
}
