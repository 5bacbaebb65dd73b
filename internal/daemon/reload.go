// This file holds a reload: the new configuration replaces the running one, keeping the
// controllers whose settings did not change, and rolls back to the old one when it fails; what
// the last reload did (reloadRecord); the NATS connection a reload dials, and its redial when the
// server closes it for good.

package daemon

import (
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// reloadRecord is what the last reload did, as the status page and veil_config_last_reload_*
// say. Its fields are guarded by Daemon.mu.
type reloadRecord struct {
	last   time.Time // of the last successful load
	err    string    // why the last reload was refused; "" once one succeeds
	ok, at prometheus.Gauge
}

func newReloadRecord() reloadRecord {
	return reloadRecord{
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_successful", Help: "1 if the last configuration reload succeeded.",
		}),
		at: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_success_timestamp_seconds", Help: "Unix time of the last successful configuration load.",
		}),
	}
}

// succeeded records a configuration loaded at now.
func (r *reloadRecord) succeeded(now time.Time) {
	r.last, r.err = now, ""
	r.ok.Set(1)
	r.at.SetToCurrentTime()
}

// failed records a reload refused for err.
func (r *reloadRecord) failed(err error) {
	r.ok.Set(0)
	r.err = err.Error()
}

// changes says what a successful apply did to the controllers, by name.
type changes struct{ kept, started, stopped []string }

// reloadPlan is the NATS side of one apply: the connection the new controllers use, and what
// happened to the old one.
type reloadPlan struct {
	old      *config.Config
	oldConn  *natsLink     // nil once torn down
	running  []*controller // the controllers running before (none once torn down)
	conn     *natsLink     // what the new configuration's components use; nil: none
	fresh    bool          // conn was dialled by this apply
	tornDown bool          // the old embedded server was stopped first (restored on failure)
}

// apply replaces the running configuration with cfg; on error the old one keeps running. A
// controller whose settings did not change keeps running untouched unless its NATS connection
// is replaced; the others are stopped (a forwarder saves its position) before their
// successors start.
func (d *Daemon) apply(cfg *config.Config) (changes, error) {
	d.mu.RLock()
	old, oldConn, running, standby := d.cfg, d.conn, d.controllers, d.standby
	d.mu.RUnlock()
	if err := replicasChange(old, cfg, oldConn); err != nil {
		return changes{}, err
	}
	var ch changes
	p := reloadPlan{old: old, oldConn: oldConn, running: running}
	if err := d.dial(cfg, &p, &ch); err != nil {
		return changes{}, err
	}
	var keep map[string]*controller
	if !p.fresh { // every component of a kept controller uses conn, which stays
		keep = keepable(p.running, standby)
	}
	next, built, err := d.assemble(cfg, p.conn, keep, &ch)
	if err != nil {
		if p.fresh {
			p.conn.Close()
		}
		if p.tornDown {
			d.restore(old)
		}
		return changes{}, err
	}
	d.swap(cfg, &p, next, built, &ch)
	return ch, nil
}

// redials says whether cfg's components need a NATS connection other than conn, the one open
// under old (nil: none): NATS changed, a credential, key or CA file was replaced though the
// text is the same, or the server closed conn for good.
func redials(old, cfg *config.Config, conn *natsLink) bool {
	if !cfg.UsesNATS() {
		return false
	}
	return conn == nil || natsChanged(old, cfg) || conn.FilesChanged() || conn.LostReason() != ""
}

// natsChanged says whether the nats section differs between old and cfg.
func natsChanged(old, cfg *config.Config) bool {
	return old == nil || !reflect.DeepEqual(old.NATS, cfg.NATS)
}

// dial sets p.conn: the open connection when it serves cfg as it is, a new one when redials
// says so, none when no component of cfg uses NATS.
func (d *Daemon) dial(cfg *config.Config, p *reloadPlan, ch *changes) error {
	if !cfg.UsesNATS() {
		return nil
	}
	p.conn = p.oldConn
	if !redials(p.old, cfg, p.oldConn) {
		if cfg.Events.Enabled && p.conn.stream == nil {
			// Events turned on over a connection that stays: the stream goes on it.
			conn, err := d.link(cfg, p.conn.Conn)
			if err != nil {
				return err
			}
			p.conn = conn
		}
		return nil
	}
	if p.oldConn != nil && sharesEmbedded(p.old.NATS, cfg.NATS) {
		// Two embedded servers cannot share a port or a store: the old one must go first,
		// and comes back should the new configuration fail.
		d.stopControllers()
		d.mu.Lock()
		d.conn = nil
		d.mu.Unlock()
		p.oldConn.Close()
		p.oldConn, p.tornDown = nil, true
		for _, ct := range p.running {
			ch.stopped = append(ch.stopped, ct.cfg.Name)
		}
		p.running = nil
	}
	conn, err := d.connect(cfg)
	if err != nil {
		if p.tornDown {
			d.restore(p.old)
		}
		return fmt.Errorf("couldn't connect to NATS: %w", err)
	}
	p.conn, p.fresh = conn, true
	return nil
}

// swap stops the controllers of p.running that next does not keep, closes a replaced
// connection, starts what was built (with replicas, what runs under a lease) and commits.
func (d *Daemon) swap(cfg *config.Config, p *reloadPlan, next, built []*controller, ch *changes) {
	var retired []*controller
	for _, ct := range p.running {
		if !slices.Contains(next, ct) {
			retired = append(retired, ct)
			ch.stopped = append(ch.stopped, ct.cfg.Name)
		}
	}
	// The retired ones serve their last data until the swap below, so a kept controller's
	// series and readiness never pause.
	d.stopAll(retired)
	if p.oldConn != nil && (p.conn == nil || p.oldConn.Conn != p.conn.Conn) {
		p.oldConn.Close()
	}
	next, idle := split(cfg, next, p.running)
	for _, ct := range built {
		if idle[ct.cfg.Name] == ct {
			continue // a replica's standby: started when its lease is acquired
		}
		if ct.run == nil {
			d.life.launch(ct, d.logger)
		} else if !ct.run.start(ct, d.logger) {
			// Its lease ended meanwhile: it waits for the next acquisition.
			next = slices.DeleteFunc(next, func(c *controller) bool { return c == ct })
			idle[ct.cfg.Name] = ct
		}
	}
	d.commit(cfg, next, idle, p.conn)
}

// keepable are the controllers a reload may keep running (or standing by) untouched, by name.
func keepable(running []*controller, standby map[string]*controller) map[string]*controller {
	keep := make(map[string]*controller, len(running)+len(standby))
	for _, ct := range running {
		keep[ct.cfg.Name] = ct
	}
	for name, ct := range standby {
		keep[name] = ct
	}
	return keep
}

// assemble lists the controllers of cfg: the ones of keep whose settings did not change, and
// the others built anew (not started) on conn.
func (d *Daemon) assemble(cfg *config.Config, conn *natsLink, keep map[string]*controller, ch *changes) (next, built []*controller, err error) {
	next = make([]*controller, 0, len(cfg.Controllers))
	for _, cc := range cfg.Controllers {
		s := settingsOf(cfg, cc)
		if ct := keep[cc.Name]; ct != nil && reflect.DeepEqual(ct.settings, s) {
			next = append(next, ct)
			ch.kept = append(ch.kept, cc.Name)
			continue
		}
		ct, err := d.builder.buildController(s, conn)
		if err != nil {
			return nil, nil, err
		}
		next = append(next, ct)
		built = append(built, ct)
		ch.started = append(ch.started, cc.Name)
	}
	return next, built, nil
}

// commit makes cfg, its controllers and conn the running configuration.
func (d *Daemon) commit(cfg *config.Config, running []*controller, standby map[string]*controller, conn *natsLink) {
	d.mu.Lock()
	d.cfg, d.controllers, d.standby, d.conn = cfg, running, standby, conn
	d.rec.succeeded(time.Now())
	d.mu.Unlock()
	d.builder.forget(cfg)
	if d.replicas != nil {
		d.replicas.coord.SetControllers(controllerNames(cfg)) // a removed controller is released
	}
}

// connect opens the NATS connection of n. NATS being unreachable is not an error: the connection
// comes up in the background and each forwarder sets up its stream and position store then
// (/-/ready says why it waits); only what a retry cannot mend fails (embedded server, key files).
func (d *Daemon) connect(cfg *config.Config) (*natsLink, error) {
	n := cfg.NATS
	if n.Embedded.Enabled {
		// A taken port shows in the embedded server only as a start timeout; say why at once.
		if err := probeListen(n.Embedded.Listen); err != nil {
			return nil, fmt.Errorf("nats.embedded.listen: %w", err)
		}
		// Said each time the server starts: at start, and after a reload that changed nats:.
		if why := natsconn.EmbeddedExposure(n.Embedded); why != "" {
			level.Warn(d.logger).Log("msg", why)
		}
	}
	conn, err := natsconn.Connect(n, log.With(d.base, "component", "nats"))
	if err != nil {
		return nil, err
	}
	link, err := d.link(cfg, conn)
	if err != nil {
		conn.Close()
	}
	return link, err
}

// link makes the events stream of cfg on conn, when events are on (replicas without events need
// the connection for the leases only). It fails only when the stream contradicts the
// configuration; NATS unreachable does not.
func (d *Daemon) link(cfg *config.Config, conn *natsconn.Conn) (*natsLink, error) {
	if !cfg.Events.Enabled {
		return &natsLink{Conn: conn}, nil
	}
	stream := forwarder.NewStream(conn, cfg.NATS, replicasOf(cfg), log.With(d.base, "component", "nats"))
	if err := stream.Verify(d.life.ctx); err != nil {
		return nil, err
	}
	return &natsLink{Conn: conn, stream: stream}, nil
}

// replicasOf is the replicas of the streams and buckets the daemon creates: with ha they outlive
// the loss of a NATS server like the leases.
func replicasOf(cfg *config.Config) int {
	if cfg.HA.Enabled {
		return cfg.HA.Replicas
	}
	return 1
}

// natsLink is the daemon's NATS connection and the events stream on it (nil without events),
// made together by connect and replaced together.
type natsLink struct {
	*natsconn.Conn
	stream *forwarder.Stream
}

func probeListen(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return nil // any free port will do
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// sharesEmbedded says whether the embedded servers of a and b would collide: the same port, or
// the same JetStream store (the server does not lock it).
func sharesEmbedded(a, b config.NATS) bool {
	if !a.Embedded.Enabled || !b.Embedded.Enabled {
		return false
	}
	_, pa, errA := net.SplitHostPort(a.Embedded.Listen)
	_, pb, errB := net.SplitHostPort(b.Embedded.Listen)
	samePort := errA != nil || errB != nil || (pa == pb && pa != "0")
	return samePort || filepath.Clean(a.Embedded.StoreDir) == filepath.Clean(b.Embedded.StoreDir)
}

// restore starts cfg (the configuration that ran before a failed reload stopped it) again on a
// fresh connection. Should that connection fail too, collection goes on without forwarding until
// a reload succeeds, and /-/healthy says so.
func (d *Daemon) restore(cfg *config.Config) {
	run := cfg
	conn, err := d.connect(cfg)
	if err != nil {
		level.Error(d.logger).Log("msg", "couldn't reconnect the previous NATS configuration; events are not forwarded until a reload succeeds", "err", err)
		c := *cfg
		c.Events.Enabled = false
		run, conn = &c, nil
	}
	ctrls, err := d.builder.build(run, conn)
	if err != nil {
		// It built before; only a file that has gone since (ca_file) can fail it now.
		level.Error(d.logger).Log("msg", "couldn't restart the previous configuration", "err", err)
		if conn != nil {
			conn.Close()
		}
		ctrls, conn = nil, nil
	}
	for _, ct := range ctrls {
		ct.start(d.life.ctx, d.logger)
	}
	d.mu.Lock()
	d.controllers, d.conn = ctrls, conn
	d.mu.Unlock()
}

// redial replaces a NATS connection the server closed for good (natsconn.Conn.Lost) by applying
// the running configuration again on a new one. With replicas it cannot (the leases live on that
// connection): /-/healthy then fails, so that the replica is restarted.
func (d *Daemon) redial() {
	d.mu.RLock()
	cfg := d.cfg
	d.mu.RUnlock()
	if cfg == nil || cfg.HA.Enabled {
		return
	}
	if _, err := d.apply(cfg); err != nil {
		level.Error(d.logger).Log("msg", "couldn't replace the NATS connection the server closed; retrying", "err", err, "in", redialRetry)
		d.mu.Lock()
		d.redialAt = time.Now().Add(redialRetry)
		d.mu.Unlock()
	}
}

// redialRetry is how long a failed redial waits before the next.
const redialRetry = 5 * time.Second

// lostConn is the channel closed when the current NATS connection is closed for good and a new
// one is to be dialled now (nil: none, replicas, or a failed redial waiting for its retry, which
// the second channel then times).
func (d *Daemon) lostConn() (<-chan struct{}, <-chan time.Time) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.conn == nil || d.conn.Conn == nil || d.cfg == nil || d.cfg.HA.Enabled {
		return nil, nil
	}
	if wait := time.Until(d.redialAt); wait > 0 {
		return nil, time.After(wait)
	}
	return d.conn.Lost(), nil
}

// reload reads the config file again; a bad file is refused and the old config keeps running.
func (d *Daemon) reload() error {
	cfg, err := config.Load(d.configFile)
	var ch changes
	if err == nil {
		ch, err = d.apply(cfg)
	}
	if err != nil {
		d.mu.Lock()
		d.rec.failed(err)
		d.mu.Unlock()
		level.Error(d.logger).Log("msg", "configuration reload refused, the previous configuration keeps running", "err", err)
		return err
	}
	level.Info(d.logger).Log("msg", "configuration reloaded", "controllers", len(cfg.Controllers),
		"kept", strings.Join(ch.kept, ","), "started", strings.Join(ch.started, ","), "stopped", strings.Join(ch.stopped, ","))
	return nil
}
