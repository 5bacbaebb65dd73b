package daemon

// The Daemon's core: the running configuration under one lock, with its named parts (life,
// builder, reload record, replicas); New builds it, Run runs and reloads its controllers until
// Stop.

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
	"github.com/veil-exporter/veil-exporter/internal/web"
)

// Options are what the command line gives the daemon.
type Options struct {
	ConfigFile string // read again on Reload
	// Logger names no component: the daemon's own lines say component=daemon, each
	// controller's inventory, guest checker and forwarder theirs.
	Logger  log.Logger
	Version string
}

// Daemon owns the running controllers and rebuilds them on reload. Its core is the running
// configuration under mu; its parts have names: its life (lifecycle.go), the builder of
// controllers (build.go), the record of reloads (reload.go), the replicas' coordinator
// (replicas.go), and the web's view of it (webSource, web.go).
type Daemon struct {
	life       lifecycle
	configFile string
	logger     log.Logger // component=daemon
	base       log.Logger // without component: each component's logger adds its own
	version    string
	started    time.Time
	// metrics are what /metrics serves: the live families, the rendered ones encoded live (for
	// name[] filtered and protobuf text scrapes), and the renderer shared by every controller's
	// rendered families and /metrics (renders pause for scrapes and prepare the formats scrapers
	// ask for).
	metrics web.Metrics
	builder builder

	// Run's goroutine owns what follows mu: it alone writes it, under mu so that the handlers
	// and collectors may read it. Reloads and the coordinator's acquisitions and releases reach
	// it as messages, one at a time.
	reloads chan chan error // Reload's; the answer comes on the channel sent
	inbox   inbox           // the coordinator's acquisitions and releases (replicas.go)

	beforeStop func(controller string) // for tests: a controller slow to stop

	mu  sync.RWMutex
	cfg *config.Config
	// With replicas (ha.enabled) the coordinator runs each controller on one replica: controllers
	// holds the ones this replica runs, standby the others, built but not started.
	controllers []*controller
	standby     map[string]*controller
	conn        *natsLink
	replicas    *replicas // nil without ha.enabled
	rec         reloadRecord
	// redialAt is when a failed redial of a NATS connection lost for good is tried again.
	redialAt time.Time
}

// New builds the controllers of cfg (with replicas also the coordinator, which starts them as
// it acquires their leases) and connects NATS; Run starts them. An error leaves nothing
// running.
func New(cfg *config.Config, o Options) (*Daemon, error) {
	d := newDaemon(context.Background(), o.ConfigFile, o.Logger, o.Version)
	level.Info(d.logger).Log("msg", "starting veil-exporter", "version", o.Version, "revision", version.GetRevision(), "branch", version.Branch, "controllers", len(cfg.Controllers))
	if _, err := d.apply(cfg); err != nil {
		d.life.cancel()
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
	live, rendered, renderer := prometheus.NewRegistry(), prometheus.NewRegistry(), exposition.NewRenderer()
	d := &Daemon{
		life:       newLifecycle(ctx),
		configFile: configFile, logger: log.With(logger, "component", "daemon"), base: logger, version: ver,
		started: time.Now(),
		metrics: web.Metrics{Live: live, Rendered: rendered, Renderer: renderer},
		builder: builder{base: logger, renderer: renderer, apiMetrics: map[string]*collector.APIMetrics{}},
		reloads: make(chan chan error),
		inbox:   newInbox(),
		rec:     newReloadRecord(),
	}
	live.MustRegister(
		versioncollector.NewCollector("veil_exporter"),
		d.rec.ok, d.rec.at,
		controllersCollector{d},
		newRunStatusCollector(d.runs),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "veil_exporter_label_values_truncated_total",
			Help: "Label values cut to 1024 bytes (ending in …) since start: a name, or a guest's answer, longer than that. A value cut at every render counts at every render.",
		}, func() float64 { return float64(exposition.LabelValuesCut()) }),
	)
	rendered.MustRegister(renderedCollector{d})
	return d
}

// Coordinator is the replicas' coordinator, nil without ha.enabled; Run runs it and closes it.
func (d *Daemon) Coordinator() *ha.Coordinator {
	if d.replicas == nil {
		return nil
	}
	return d.replicas.coord
}

// Run is the goroutine that owns the daemon's state and everything it starts: it runs the
// replicas' coordinator, carries out reloads and the coordinator's acquisitions and releases
// one at a time until ctx is done or Stop is called, then (after a reload in progress) closes
// the coordinator (the other replicas take this one's controllers over at once), stops every
// controller and closes NATS.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.life.done)
	defer d.shutdown()
	d.life.begin(d.logger)
	if d.replicas != nil {
		// Not under ctx: a cancelled coordinator stops renewing without releasing (a killed
		// replica); shutdown's Close hands everything over at once.
		go d.replicas.coord.Run(context.Background())
	}
	for {
		lost, retry := d.lostConn()
		select {
		case <-ctx.Done():
			return nil
		case <-d.life.stopc:
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

// errStopped answers a reload asked for once the daemon stopped.
var errStopped = errors.New("the exporter is shutting down")

// Reload reads the configuration file again; a bad file is refused and the previous
// configuration keeps running. It waits for Run to carry it out.
func (d *Daemon) Reload() error {
	answer := make(chan error, 1)
	select {
	case d.reloads <- answer:
		return <-answer
	case <-d.life.done:
		return errStopped
	}
}

// Stop ends Run and returns once it has stopped everything.
func (d *Daemon) Stop() {
	d.life.stop()
}

// shutdown stops every controller and closes NATS.
func (d *Daemon) shutdown() {
	if d.replicas != nil {
		d.replicas.close() // returns once the coordinator has released every lease
	}
	d.life.cancel()
	d.stopControllers()
	d.mu.Lock()
	conn := d.conn
	d.conn = nil
	d.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}
