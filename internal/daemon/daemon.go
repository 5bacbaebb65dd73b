package daemon

// The Daemon: New builds it, Run runs and reloads its controllers until Stop.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// Options are what the command line gives the daemon.
type Options struct {
	ConfigFile string // read again on Reload
	// Logger names no component: the daemon's own lines say component=daemon, each
	// controller's inventory, guest checker and forwarder theirs.
	Logger  log.Logger
	Version string
}

// Daemon owns the running controllers and rebuilds them on reload.
type Daemon struct {
	ctx        context.Context // of the controllers that run without a lease; cancelled by Stop
	cancel     context.CancelFunc
	configFile string
	logger     log.Logger // component=daemon
	base       log.Logger // without component: each component's logger adds its own
	version    string
	registry   *prometheus.Registry // live families; with renderedRegistry, everything
	// renderedRegistry encodes live what the controllers render, for name[] filtered and
	// protobuf text scrapes.
	renderedRegistry *prometheus.Registry
	// renderer is shared by every controller's rendered families and /metrics: renders pause
	// for scrapes and prepare the formats scrapers ask for.
	renderer *exposition.Renderer
	started  time.Time

	reloadOK, reloadTime prometheus.Gauge

	// Run's goroutine owns what follows mu: it alone writes it, under mu so that the handlers
	// and collectors may read it. Reloads and the coordinator's acquisitions and releases reach
	// it as messages, one at a time.
	reloads chan chan error // Reload's; the answer comes on the channel sent
	inbox   inbox           // the coordinator's acquisitions and releases (replicas.go)

	// With replicas (ha.enabled) the coordinator runs each controller on one replica: controllers
	// holds the ones this replica runs, standby the others, built but not started.
	coord *ha.Coordinator
	// leaseConn is the coordinator's own NATS connection (see startReplicas).
	leaseConn *natsconn.Conn
	leases    map[string]*leaseRun // by controller; the coordinator's goroutine only (acquired, released)

	beforeStop func(controller string) // for tests: a controller slow to stop

	// running is set when Run starts; until then (New) the controllers built wait in starting.
	// Run's goroutine only, and New's before it.
	running  bool
	starting []*controller

	mu          sync.RWMutex
	cfg         *config.Config
	controllers []*controller
	standby     map[string]*controller
	conn        *natsLink
	apiMetrics  map[string]*collector.APIMetrics // kept across reloads: counters never reset
	lastReload  time.Time
	// redialAt is when a failed redial of a NATS connection lost for good is tried again.
	redialAt    time.Time
	reloadError string

	stopOnce sync.Once
	stopc    chan struct{} // closed by Stop
	done     chan struct{} // closed when Run has stopped everything
}

// New builds the controllers of cfg (with replicas also the coordinator, which starts them as
// it acquires their leases) and connects NATS; Run starts them. An error leaves nothing
// running.
func New(cfg *config.Config, o Options) (*Daemon, error) {
	d := newDaemon(context.Background(), o.ConfigFile, o.Logger, o.Version)
	level.Info(d.logger).Log("msg", "starting veil-exporter", "version", o.Version, "revision", version.GetRevision(), "branch", version.Branch, "controllers", len(cfg.Controllers))
	if _, err := d.apply(cfg); err != nil {
		d.cancel()
		return nil, err
	}
	if cfg.HA.Enabled {
		d.startReplicas(cfg)
	}
	return d, nil
}

// newDaemon builds a daemon that runs nothing yet.
// The Go, process and promhttp metrics are the handler's (--web.disable-exporter-metrics).
func newDaemon(ctx context.Context, configFile string, logger log.Logger, ver string) *Daemon {
	d := &Daemon{
		configFile: configFile, logger: log.With(logger, "component", "daemon"), base: logger, version: ver,
		registry:         prometheus.NewRegistry(),
		renderedRegistry: prometheus.NewRegistry(),
		renderer:         exposition.NewRenderer(),
		started:          time.Now(),
		apiMetrics:       map[string]*collector.APIMetrics{},
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_successful", Help: "1 if the last configuration reload succeeded.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "veil_config_last_reload_success_timestamp_seconds", Help: "Unix time of the last successful configuration load.",
		}),
		reloads: make(chan chan error),
		inbox:   newInbox(),
		leases:  map[string]*leaseRun{},
		stopc:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	d.ctx, d.cancel = context.WithCancel(ctx)
	d.registry.MustRegister(
		versioncollector.NewCollector("veil_exporter"),
		d.reloadOK, d.reloadTime,
		controllersCollector{d},
		newRunStatusCollector(d.runs),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "veil_exporter_label_values_truncated_total",
			Help: "Label values cut to 1024 bytes (ending in …) since start: a name, or a guest's answer, longer than that. A value cut at every render counts at every render.",
		}, func() float64 { return float64(exposition.LabelValuesCut()) }),
	)
	d.renderedRegistry.MustRegister(renderedCollector{d})
	return d
}

// Coordinator is the replicas' coordinator, nil without ha.enabled; Run runs it and closes it.
func (d *Daemon) Coordinator() *ha.Coordinator { return d.coord }

// Run is the goroutine that owns the daemon's state and everything it starts: it runs the
// replicas' coordinator, carries out reloads and the coordinator's acquisitions and releases
// one at a time until ctx is done or Stop is called, then (after a reload in progress) closes
// the coordinator (the other replicas take this one's controllers over at once), stops every
// controller and closes NATS.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.done)
	defer d.shutdown()
	d.running = true
	for _, ct := range d.starting {
		ct.start(d.ctx, d.logger)
	}
	d.starting = nil
	if d.coord != nil {
		// Not under ctx: a cancelled coordinator stops renewing without releasing (a killed
		// replica); shutdown's Close hands everything over at once.
		go d.coord.Run(context.Background())
	}
	for {
		lost, retry := d.lostConn()
		select {
		case <-ctx.Done():
			return nil
		case <-d.stopc:
			return nil
		case answer := <-d.reloads:
			answer <- d.reload()
		case <-lost:
			d.redial()
		case <-retry:
		case <-d.inbox.ready:
			for _, m := range d.inbox.take() {
				m(d)
			}
		}
	}
}

// launch starts ct, or has Run start it when New built it.
func (d *Daemon) launch(ct *controller) {
	if !d.running {
		d.starting = append(d.starting, ct)
		return
	}
	ct.start(d.ctx, d.logger)
}

// errStopped answers a reload asked for once the daemon stopped.
var errStopped = errors.New("the exporter is shutting down")

// Reload reads the configuration file again; a bad file is refused and the previous
// configuration keeps running. It waits for Run to carry it out.
func (d *Daemon) Reload() error {
	answer := make(chan error, 1)
	select {
	case d.reloads <- answer:
		return <-answer
	case <-d.done:
		return errStopped
	}
}

// Stop ends Run and returns once it has stopped everything.
func (d *Daemon) Stop() {
	d.stopOnce.Do(func() { close(d.stopc) })
	<-d.done
}

// shutdown stops every controller and closes NATS.
func (d *Daemon) shutdown() {
	if d.coord != nil {
		d.coord.Close() // returns once its Run has released every lease
		d.leaseConn.Close()
	}
	d.cancel()
	d.stopControllers()
	d.mu.Lock()
	conn := d.conn
	d.conn = nil
	d.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}
