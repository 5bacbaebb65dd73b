// Replicas (ha.enabled): the daemon runs a controller only while it holds the controller's lease,
// which package ha grants to one live replica at a time. This file is the wiring: which
// controllers run and which wait, and what a reload may change.
package daemon

import (
	"errors"
	"reflect"
	"slices"

	"github.com/go-kit/log/level"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/ha"
)

// replicasChange refuses a reload that switches replicas on or off, or changes the ha or nats
// sections while they are on: the leases live on that connection, and a new one would let go of
// every controller at once. A restart hands them over one by one.
func (d *Daemon) replicasChange(old, cfg *config.Config, conn *forwarder.Conn) error {
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
// reload (kept) or its lease is held (rebuilt: it starts under that lease).
func (d *Daemon) split(cfg *config.Config, next, running []*controller) ([]*controller, map[string]*controller) {
	if !cfg.HA.Enabled {
		return next, nil
	}
	var run []*controller
	idle := map[string]*controller{}
	for _, ct := range next {
		var l *ha.Lease
		if d.coord != nil {
			l = d.coord.Lease(ct.cfg.Name)
		}
		switch {
		case slices.Contains(running, ct):
			run = append(run, ct)
		case ct.used:
			// A standby that ran before: its loops do not restart, the next acquisition rebuilds it.
			idle[ct.cfg.Name] = ct
		case l != nil:
			// A held controller whose settings changed: it starts again under the same lease.
			ct.lease.Store(l)
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

// startReplicas builds the coordinator of the first configuration (ha.enabled cannot change on
// a reload); the caller runs it. Until it acquires a lease every controller waits.
func (d *Daemon) startReplicas(cfg *config.Config) {
	d.mu.RLock()
	conn := d.conn
	d.mu.RUnlock()
	js, err := conn.JetStream()
	if err != nil {
		// Only a connection without JetStream support in the client fails here; report it.
		level.Error(d.logger).Log("msg", "couldn't start replicas: no JetStream on the NATS connection", "err", err)
		return
	}
	coord, err := ha.New(js, ha.Options{
		Bucket: cfg.HA.Bucket, Replicas: cfg.HA.Replicas, LeaseTTL: cfg.HA.LeaseTTL, Instance: cfg.HA.Instance,
		Controllers: controllerNames(cfg), Logger: d.base, // the package adds component=ha
		OnAcquire: d.acquired, OnRelease: d.released,
	})
	if err != nil {
		level.Error(d.logger).Log("msg", "couldn't start replicas", "err", err)
		return
	}
	d.mu.Lock()
	d.coord = coord
	d.mu.Unlock()
	d.registry.MustRegister(coord)
	level.Info(d.logger).Log("msg", "replicas on: controllers run where their lease is held", "instance", coord.Instance(),
		"bucket", cfg.HA.Bucket, "lease_ttl", cfg.HA.LeaseTTL)
}

// acquired starts a controller under its new lease; the coordinator calls it and it must not
// block (a reload in progress finishes first).
func (d *Daemon) acquired(l *ha.Lease) {
	d.haMu.Lock()
	defer d.haMu.Unlock()
	name := l.Controller()
	d.mu.RLock()
	ct, cfg, conn := d.standby[name], d.cfg, d.conn
	d.mu.RUnlock()
	if ct == nil {
		return // removed by the reload that just finished: the coordinator releases it
	}
	if ct.used {
		nct, err := d.buildController(cfg, ct.cfg, conn)
		if err != nil {
			// It built at the last reload; only a file gone since (ca_file) fails it now.
			level.Error(d.logger).Log("msg", "couldn't start an acquired controller", "controller", name, "err", err)
			return
		}
		ct = nct
	}
	ct.lease.Store(l)
	ct.start(l.Context(), d.logger)
	d.mu.Lock()
	delete(d.standby, name)
	d.controllers = inConfigOrder(d.cfg, append(slices.Clone(d.controllers), ct))
	d.mu.Unlock()
}

// released stops a controller whose lease this replica lets go of, and returns once nothing runs
// for it any more: its forwarder has saved its position before the next owner can start.
func (d *Daemon) released(name string) {
	d.haMu.Lock()
	defer d.haMu.Unlock()
	d.mu.Lock()
	i := slices.IndexFunc(d.controllers, func(ct *controller) bool { return ct.cfg.Name == name })
	if i < 0 {
		d.mu.Unlock()
		return
	}
	ct := d.controllers[i]
	d.controllers = slices.Delete(slices.Clone(d.controllers), i, i+1)
	if d.cfg != nil && hasController(d.cfg, name) {
		d.standby[name] = ct
	}
	d.mu.Unlock()
	ct.stop()
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
