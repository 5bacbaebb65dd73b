package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/veil"
)

// daemon owns the running controllers and rebuilds them on reload.
type daemon struct {
	ctx        context.Context // of the whole process
	configFile string
	logger     log.Logger // component=daemon
	base       log.Logger // without component: each component's logger adds its own
	version    string
	registry   *prometheus.Registry // live families; with renderedRegistry, everything
	// renderedRegistry encodes live what the controllers render, for non-text scrapes.
	renderedRegistry *prometheus.Registry
	started          time.Time

	reloadOK, reloadTime prometheus.Gauge

	reloadMu sync.Mutex // one reload at a time

	// With replicas (ha.enabled) the coordinator runs each controller on one replica: controllers
	// holds the ones this replica runs, standby the others, built but not started; haMu keeps a
	// reload and the coordinator's acquisitions and releases one at a time (replicas.go).
	coord *ha.Coordinator
	haMu  sync.Mutex

	mu          sync.RWMutex
	cfg         *config.Config
	controllers []*controller
	standby     map[string]*controller
	conn        *forwarder.Conn
	apiMetrics  map[string]*collector.APIMetrics // kept across reloads: counters never reset
	lastReload  time.Time
	reloadError string
}

// controller is everything that runs for one platform controller.
type controller struct {
	cfg       config.Controller
	settings  settings // what it was built from; a reload keeps it while these stay equal
	inventory *collector.Inventory
	guest     *collector.GuestChecker // nil when guest checks are off
	forwarder *forwarder.Forwarder    // nil when events are off
	cancel    context.CancelFunc      // nil until started
	done      sync.WaitGroup
	// With replicas: the lease it runs under (the forwarder's fence), and whether it was ever
	// started (its loops are not restarted: a controller acquired again is built afresh).
	lease atomic.Pointer[ha.Lease]
	used  bool
}

// newDaemon runs on logger, which names no component: the daemon's own lines say
// component=daemon, each controller's inventory, guest checker and forwarder theirs.
// The Go, process and promhttp metrics are the handler's (--web.disable-exporter-metrics).
func newDaemon(ctx context.Context, configFile string, logger log.Logger, ver string) *daemon {
	d := &daemon{
		ctx: ctx, configFile: configFile, logger: log.With(logger, "component", "daemon"), base: logger, version: ver,
		registry:         prometheus.NewRegistry(),
		renderedRegistry: prometheus.NewRegistry(),
		started:          time.Now(),
		apiMetrics:       map[string]*collector.APIMetrics{},
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_successful", Help: "1 if the last configuration reload succeeded.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_success_timestamp_seconds", Help: "Unix time of the last successful configuration load.",
		}),
	}
	d.registry.MustRegister(
		versioncollector.NewCollector("veil_exporter"),
		d.reloadOK, d.reloadTime,
		controllersCollector{d},
		newRunStatusCollector(d.runs),
	)
	d.renderedRegistry.MustRegister(renderedCollector{d})
	return d
}

// renderedSets are the rendered series of every controller, in configuration order: what a
// text scrape writes beside d.registry's live families.
func (d *daemon) renderedSets() []*exposition.Set {
	d.mu.RLock()
	ctrls := d.controllers
	d.mu.RUnlock()
	sets := make([]*exposition.Set, 0, 2*len(ctrls))
	for _, ct := range ctrls {
		sets = append(sets, ct.inventory.Rendered())
		if ct.guest != nil {
			sets = append(sets, ct.guest.Rendered())
		}
	}
	return sets
}

// renderedCollector encodes live what renderedSets hold, for scrapes in other formats.
type renderedCollector struct{ d *daemon }

func (renderedCollector) Describe(chan<- *prometheus.Desc) {}
func (c renderedCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.RLock()
	ctrls := c.d.controllers
	c.d.mu.RUnlock()
	for _, ct := range ctrls {
		ct.inventory.CollectRendered(ch)
		if ct.guest != nil {
			ct.guest.CollectRendered(ch)
		}
	}
}

// controllersCollector delegates the live families to whatever controllers run now; it
// describes nothing (unchecked) because the set changes on reload.
type controllersCollector struct{ d *daemon }

func (controllersCollector) Describe(chan<- *prometheus.Desc) {}
func (c controllersCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.RLock()
	ctrls := c.d.controllers
	api := make([]*collector.APIMetrics, 0, len(ctrls))
	for _, ct := range ctrls {
		api = append(api, c.d.apiMetrics[ct.cfg.Name])
	}
	c.d.mu.RUnlock()
	for i, ct := range ctrls {
		ct.inventory.CollectLive(ch)
		api[i].Collect(ch)
		if ct.guest != nil {
			ct.guest.CollectLive(ch)
		}
		if ct.forwarder != nil {
			ct.forwarder.Collect(ch)
		}
	}
}

// newClient builds the API client of one controller; observer may be nil.
func newClient(c config.Controller, observer veil.Observer) (*veil.Client, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: c.TLS.InsecureSkipVerify} //nolint:gosec // opt-in, for lab controllers
	if c.TLS.CAFile != "" {
		pem, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't read ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", c.TLS.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = c.MaxConcurrency
	client, err := veil.New(veil.Config{
		URL:                  c.URL,
		Token:                string(c.Token),
		TokenFile:            c.TokenFile,
		HTTPClient:           &http.Client{Transport: tr},
		Timeout:              c.Timeout,
		MaxConcurrency:       c.MaxConcurrency,
		MaxRequestsPerSecond: c.MaxRequestsPerSecond,
		Observer:             observer,
		UserAgent:            "veil-exporter",
	})
	if err != nil && c.URL != "" && strings.Contains(err.Error(), c.URL) {
		// The client may quote the URL it refuses; the configuration check masks it first, this
		// keeps it masked should that ever change.
		return nil, errors.New(strings.ReplaceAll(err.Error(), c.URL, config.RedactURL(c.URL)))
	}
	return client, err
}

// settings is everything of a configuration that shapes one controller's loops. A reload keeps
// a running controller whose settings are equal (and whose NATS connection is kept), so its
// counters, guest series and readiness carry on.
type settings struct {
	Controller config.Controller
	CA         string // content of tls.ca_file: a replaced CA file takes effect on reload
	Collect    config.Collect
	Guest      config.Guest  // zero when guest checks are off
	Events     config.Events // zero when events are off
	NATS       config.NATS   // zero when events are off
}

func settingsOf(cfg *config.Config, cc config.Controller) settings {
	s := settings{Controller: cc, Collect: cfg.Collect}
	if cfg.Guest.Enabled {
		s.Guest = cfg.Guest
	}
	if cfg.Events.Enabled {
		s.Events, s.NATS = cfg.Events, cfg.NATS
	}
	if cc.TLS.CAFile != "" {
		// An unreadable file differs from any content that built before, so the controller is
		// rebuilt and the reload refused with newClient's error.
		pem, err := os.ReadFile(cc.TLS.CAFile)
		if err != nil {
			s.CA = "unreadable: " + err.Error()
		} else {
			s.CA = string(pem)
		}
	}
	return s
}

// build constructs (without starting) the controllers of cfg.
func (d *daemon) build(cfg *config.Config, conn *forwarder.Conn) ([]*controller, error) {
	var out []*controller
	for _, cc := range cfg.Controllers {
		ct, err := d.buildController(cfg, cc, conn)
		if err != nil {
			return nil, err
		}
		out = append(out, ct)
	}
	return out, nil
}

// buildController constructs (without starting) controller cc of cfg. Every log line carries
// controller and component (inventory, guest, events): the component is set here where the
// package does not set it itself; the packages add the controller.
func (d *daemon) buildController(cfg *config.Config, cc config.Controller, conn *forwarder.Conn) (*controller, error) {
	d.mu.RLock()
	api := d.apiMetrics[cc.Name]
	d.mu.RUnlock()
	if api == nil {
		api = collector.NewAPIMetrics(cc.Name)
	}
	client, err := newClient(cc, api.Observe)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	inv, err := collector.NewInventory(cc.Name, client, cfg.Collect, log.With(d.base, "component", "inventory"))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	ct := &controller{cfg: cc, settings: settingsOf(cfg, cc), inventory: inv}
	if cfg.Guest.Enabled {
		ct.guest = collector.NewGuestChecker(cc.Name, client, cfg.Guest, inv, log.With(d.base, "component", "guest"))
	}
	if cfg.Events.Enabled {
		var fence func() bool
		if cfg.HA.Enabled {
			// Nothing is published or saved once another replica may run the controller.
			fence = func() bool { l := ct.lease.Load(); return l != nil && l.Held() }
		}
		ct.forwarder, err = forwarder.New(forwarder.Options{
			Controller: cc.Name, ControllerURL: cc.URL, Client: client,
			Events: cfg.Events, NATS: cfg.NATS, Conn: conn, Logger: d.base, // adds component=events
			// Catch-up may read as many pages at once as the controller admits requests.
			Concurrency: cc.MaxConcurrency,
			Fence:       fence,
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
		}
	}
	d.mu.Lock()
	d.apiMetrics[cc.Name] = api
	d.mu.Unlock()
	return ct, nil
}

func (ct *controller) start(parent context.Context, logger log.Logger) {
	ctx, cancel := context.WithCancel(parent)
	ct.cancel, ct.used = cancel, true
	ct.done.Add(1)
	go func() { defer ct.done.Done(); ct.inventory.Run(ctx) }()
	if ct.guest != nil {
		ct.done.Add(1)
		go func() { defer ct.done.Done(); ct.guest.Run(ctx) }()
	}
	if ct.forwarder != nil {
		ct.done.Add(1)
		go func() {
			defer ct.done.Done()
			if err := ct.forwarder.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				level.Error(logger).Log("msg", "event forwarder stopped", "controller", ct.cfg.Name, "err", err)
			}
		}()
	}
}

// stop cancels the controller's loops and waits for them, so a forwarder has saved its
// position before its successor starts.
func (ct *controller) stop() {
	if ct.cancel == nil {
		return // never started (a replica's standby)
	}
	ct.cancel()
	ct.done.Wait()
}

// changes says what a successful apply did to the controllers, by name.
type changes struct{ kept, started, stopped []string }

// apply replaces the running configuration with cfg; on error the old one keeps running. A
// controller whose settings did not change keeps running untouched unless its NATS connection
// is replaced; the others are stopped (a forwarder saves its position) before their
// successors start.
func (d *daemon) apply(cfg *config.Config) (changes, error) {
	d.haMu.Lock() // the coordinator neither starts nor stops a controller meanwhile
	defer d.haMu.Unlock()
	d.mu.RLock()
	old, oldConn, running, standby := d.cfg, d.conn, d.controllers, d.standby
	d.mu.RUnlock()
	if err := d.replicasChange(old, cfg, oldConn); err != nil {
		return changes{}, err
	}

	var ch changes
	// d.conn is always open: a new connection is needed only when forwarding (or replicas) and
	// NATS changed (or the last connection was lost in a failed reload).
	var conn *forwarder.Conn
	fresh := false
	if cfg.Events.Enabled || cfg.HA.Enabled {
		conn = oldConn
		// NATS connection lifecycle (forwarder): a replaced credential, key or CA file also
		// needs a new connection, though the configuration text is the same.
		fresh = oldConn == nil || !reflect.DeepEqual(old.NATS, cfg.NATS) || oldConn.FilesChanged()
	}
	tornDown := false
	if fresh {
		if oldConn != nil && sharesEmbedded(old.NATS, cfg.NATS) {
			// Two embedded servers cannot share a port or a store: the old one must go first,
			// and comes back should the new configuration fail.
			d.stopControllers()
			d.mu.Lock()
			d.conn = nil
			d.mu.Unlock()
			oldConn.Close()
			oldConn, tornDown = nil, true
			for _, ct := range running {
				ch.stopped = append(ch.stopped, ct.cfg.Name)
			}
			running = nil
		}
		var err error
		if conn, err = d.connect(cfg); err != nil {
			if tornDown {
				d.restore(old)
			}
			return changes{}, fmt.Errorf("couldn't connect to NATS: %w", err)
		}
	}

	keep := map[string]*controller{}
	if !fresh {
		// Every forwarder of a kept controller publishes on conn, which stays.
		for _, ct := range running {
			keep[ct.cfg.Name] = ct
		}
		for name, ct := range standby {
			keep[name] = ct
		}
	}
	next := make([]*controller, 0, len(cfg.Controllers))
	var built []*controller
	for _, cc := range cfg.Controllers {
		if ct := keep[cc.Name]; ct != nil && reflect.DeepEqual(ct.settings, settingsOf(cfg, cc)) {
			next = append(next, ct)
			ch.kept = append(ch.kept, cc.Name)
			continue
		}
		ct, err := d.buildController(cfg, cc, conn)
		if err != nil {
			if fresh {
				conn.Close()
			}
			if tornDown {
				d.restore(old)
			}
			return changes{}, err
		}
		next = append(next, ct)
		built = append(built, ct)
		ch.started = append(ch.started, cc.Name)
	}
	var retired []*controller
	for _, ct := range running {
		if !slices.Contains(next, ct) {
			retired = append(retired, ct)
			ch.stopped = append(ch.stopped, ct.cfg.Name)
		}
	}
	// The retired ones serve their last data until the swap below, so a kept controller's
	// series and readiness never pause.
	stopAll(retired)
	if oldConn != nil && oldConn != conn {
		oldConn.Close()
	}
	next, idle := d.split(cfg, next, running)
	for _, ct := range built {
		if idle[ct.cfg.Name] == ct {
			continue // a replica's standby: started when its lease is acquired
		}
		if l := ct.lease.Load(); l != nil {
			ct.start(l.Context(), d.logger)
		} else {
			ct.start(d.ctx, d.logger)
		}
	}
	d.mu.Lock()
	d.cfg, d.controllers, d.standby, d.conn = cfg, next, idle, conn
	for name := range d.apiMetrics {
		if !hasController(cfg, name) {
			delete(d.apiMetrics, name)
		}
	}
	d.lastReload, d.reloadError = time.Now(), ""
	d.mu.Unlock()
	d.reloadOK.Set(1)
	d.reloadTime.SetToCurrentTime()
	if cfg.HA.Enabled {
		d.coordinate(cfg, conn)
	}
	return ch, nil
}

// connect opens the NATS connection of n. NATS being unreachable is not an error: the connection
// comes up in the background and each forwarder sets up its stream and position store then
// (/-/ready says why it waits); only what a retry cannot mend fails (embedded server, key files).
func (d *daemon) connect(cfg *config.Config) (*forwarder.Conn, error) {
	n := cfg.NATS
	if n.Embedded.Enabled {
		// A taken port shows in the embedded server only as a start timeout; say why at once.
		if err := probeListen(n.Embedded.Listen); err != nil {
			return nil, fmt.Errorf("nats.embedded.listen: %w", err)
		}
	}
	conn, err := forwarder.Connect(n, log.With(d.base, "component", "nats"))
	if err != nil {
		return nil, err
	}
	if cfg.HA.Enabled {
		// The stream and the positions bucket outlive the loss of a NATS server like the leases.
		conn.SetReplicas(cfg.HA.Replicas)
	}
	// A stream that contradicts the configuration refuses it; NATS unreachable does not. Replicas
	// without events need the connection for the leases only.
	if !cfg.Events.Enabled {
		return conn, nil
	}
	if err := conn.Verify(d.ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
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
func (d *daemon) restore(cfg *config.Config) {
	run := cfg
	conn, err := d.connect(cfg)
	if err != nil {
		level.Error(d.logger).Log("msg", "couldn't reconnect the previous NATS configuration; events are not forwarded until a reload succeeds", "err", err)
		c := *cfg
		c.Events.Enabled = false
		run, conn = &c, nil
	}
	ctrls, err := d.build(run, conn)
	if err != nil {
		// It built before; only a file that has gone since (ca_file) can fail it now.
		level.Error(d.logger).Log("msg", "couldn't restart the previous configuration", "err", err)
		if conn != nil {
			conn.Close()
		}
		ctrls, conn = nil, nil
	}
	for _, ct := range ctrls {
		ct.start(d.ctx, d.logger)
	}
	d.mu.Lock()
	d.controllers, d.conn = ctrls, conn
	d.mu.Unlock()
}

func hasController(cfg *config.Config, name string) bool {
	for _, c := range cfg.Controllers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func (d *daemon) stopControllers() {
	d.mu.Lock()
	ctrls := d.controllers
	d.controllers = nil
	d.mu.Unlock()
	stopAll(ctrls)
}

// stopAll stops ctrls side by side.
func stopAll(ctrls []*controller) {
	var wg sync.WaitGroup
	for _, ct := range ctrls {
		wg.Add(1)
		go func() { defer wg.Done(); ct.stop() }()
	}
	wg.Wait()
}

// reload reads the config file again; a bad file is refused and the old config keeps running.
func (d *daemon) reload() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	cfg, err := config.Load(d.configFile)
	var ch changes
	if err == nil {
		ch, err = d.apply(cfg)
	}
	if err != nil {
		d.reloadOK.Set(0)
		d.mu.Lock()
		d.reloadError = err.Error()
		d.mu.Unlock()
		level.Error(d.logger).Log("msg", "configuration reload refused, the previous configuration keeps running", "err", err)
		return err
	}
	level.Info(d.logger).Log("msg", "configuration reloaded", "controllers", len(cfg.Controllers),
		"kept", strings.Join(ch.kept, ","), "started", strings.Join(ch.started, ","), "stopped", strings.Join(ch.stopped, ","))
	return nil
}

func (d *daemon) stop() {
	d.mu.RLock()
	coord := d.coord
	d.mu.RUnlock()
	if coord != nil {
		// First, so the other replicas take this one's controllers over at once: it releases
		// each lease after its controller stopped (its forwarder saved its position).
		coord.Close()
	}
	d.stopControllers()
	d.mu.Lock()
	conn := d.conn
	d.conn = nil
	d.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}
