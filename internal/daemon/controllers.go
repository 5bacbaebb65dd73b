// This file holds what runs for one platform controller: its API client, inventory, guest
// checker and forwarder, built from its settings and started and stopped as one.

package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/guest"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// controller is everything that runs for one platform controller.
type controller struct {
	cfg      config.Controller
	settings settings // what it was built from; a reload keeps it while these stay equal
	// parts are its components (components.go): the inventory, then the push channel, the
	// inventory on NATS, the guest checker and the event forwarder when they are on.
	parts  parts
	cancel context.CancelFunc // nil until started
	done   sync.WaitGroup
	// With replicas: the lease it runs under (the forwarder's fence), and whether it was ever
	// started (its loops are not restarted: a controller acquired again is built afresh).
	lease atomic.Pointer[ha.Lease]
	run   *leaseRun // what it runs under; Run's goroutine only
	used  bool
}

// NewClient builds the API client of one controller; api (its request metrics and rejected
// objects) may be nil.
func NewClient(c config.Controller, api *collector.APIMetrics) (*veil.Client, error) {
	var observer veil.Observer
	var rejected veil.RejectFunc
	if api != nil {
		observer, rejected = api.Observe, api.Rejected
	}
	client, err := veil.New(veil.Config{
		URL:                  c.URL,
		Token:                string(c.Token),
		TokenFile:            c.TokenFile,
		CAFile:               c.TLS.CAFile,
		InsecureSkipVerify:   c.TLS.InsecureSkipVerify,
		Timeout:              c.Timeout,
		MaxConcurrency:       c.MaxConcurrency,
		MaxRequestsPerSecond: c.MaxRequestsPerSecond,
		Observer:             observer,
		Rejected:             rejected,
		UserAgent:            "veil-exporter",
	})
	if err != nil && c.URL != "" && strings.Contains(err.Error(), c.URL) {
		// The client may quote the URL it refuses; the configuration check masks it first, this
		// keeps it masked should that ever change.
		return nil, errors.New(strings.ReplaceAll(err.Error(), c.URL, config.RedactURL(c.URL)))
	}
	return client, err
}

// settings is everything of a configuration that building one controller reads: buildController
// takes nothing else, so a reload that finds them equal may keep the controller running (its
// counters, guest series and readiness carry on) on the same NATS connection.
type settings struct {
	Controller config.Controller
	CA         string // content of tls.ca_file: a replaced CA file takes effect on reload
	Collect    config.Collect
	Guest      config.Guest  // zero when guest checks are off
	Events     config.Events // zero when events are off
	// NATS is what the components read through the connection (zero when none uses it): the
	// events stream, the inventory bucket (when InventoryOnNATS).
	NATS            config.NATS
	InventoryOnNATS bool
	// Fenced: replicas are on, so what is published or written waits for the lease; Replicas is
	// the replicas of the streams and buckets made.
	Fenced   bool
	Replicas int
}

func settingsOf(cfg *config.Config, cc config.Controller) settings {
	s := settings{Controller: cc, Collect: cfg.Collect, InventoryOnNATS: cfg.InventoryOnNATS(), Fenced: cfg.HA.Enabled, Replicas: replicasOf(cfg)}
	if cfg.Guest.Enabled {
		s.Guest = cfg.Guest
	}
	if cfg.Events.Enabled {
		s.Events = cfg.Events
	}
	if cfg.Events.Enabled || s.InventoryOnNATS {
		s.NATS = cfg.NATS
	}
	if cc.TLS.CAFile != "" {
		// An unreadable file differs from any content that built before, so the controller is
		// rebuilt and the reload refused with NewClient's error.
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
func (d *Daemon) build(cfg *config.Config, conn *natsLink) ([]*controller, error) {
	var out []*controller
	for _, cc := range cfg.Controllers {
		ct, err := d.buildController(settingsOf(cfg, cc), conn)
		if err != nil {
			return nil, err
		}
		out = append(out, ct)
	}
	return out, nil
}

// buildController constructs (without starting) the controller s describes; it reads nothing
// of the configuration but s. Every log line carries controller and component (inventory,
// guest, events): the component is set here where the package does not set it itself; the
// packages add the controller.
func (d *Daemon) buildController(s settings, conn *natsLink) (*controller, error) {
	cc := s.Controller
	d.mu.RLock()
	api := d.apiMetrics[cc.Name]
	d.mu.RUnlock()
	if api == nil {
		api = collector.NewAPIMetrics(cc.Name, log.With(d.base, "component", "client"))
	}
	client, err := NewClient(cc, api)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	inv, err := inventory.NewStore(cc.Name, client, s.Collect, log.With(d.base, "component", "inventory"))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	ct := &controller{cfg: cc, settings: s}
	ct.parts.add(&inventoryPart{Store: inv, metrics: collector.NewInventory(inv, d.renderer), stuck: inventory.RefreshLimit(s.Collect.Interval, true) + s.Collect.Interval + cc.Timeout})
	var fence func() bool
	if s.Fenced {
		// Nothing is published or written once another replica may run the controller.
		fence = func() bool { l := ct.lease.Load(); return l != nil && l.Held() }
	}
	if s.Collect.Push {
		feed := inventory.NewPushFeed(cc.Name, client, inv, s.Collect.ResyncInterval, log.With(d.base, "component", "push"))
		ct.parts.add(pushPart{feed})
	}
	if conn != nil && s.InventoryOnNATS {
		w, err := changefeed.New(changefeed.Options{
			Controller: cc.Name, Conn: conn.Conn, Config: s.NATS.Inventory, Replicas: s.Replicas,
			Fence: fence, Resync: inv.Resync, Logger: d.base,
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
		}
		inv.SetObserver(w)
		ct.parts.add(kvPart{w})
	}
	if s.Guest.Enabled {
		g := guest.NewChecker(cc.Name, client, s.Guest, inv, guest.Outputs{Logger: log.With(d.base, "component", "guest"), Renderer: d.renderer})
		ct.parts.add(guestPart{g})
	}
	if s.Events.Enabled {
		if err := d.addForwarder(ct, client, conn, fence); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	d.apiMetrics[cc.Name] = api
	d.mu.Unlock()
	return ct, nil
}

// addForwarder adds the event forwarder of ct's settings, publishing on conn's stream.
func (d *Daemon) addForwarder(ct *controller, client *veil.Client, conn *natsLink, fence func() bool) error {
	var stream *forwarder.Stream
	if conn != nil {
		stream = conn.stream
	}
	cc := ct.settings.Controller
	fw, err := forwarder.New(forwarder.Options{
		Controller: cc.Name, ControllerURL: cc.URL, Client: client,
		Events: ct.settings.Events, Stream: stream, Logger: d.base, // adds component=events
		// Catch-up may read as many pages at once as the controller admits requests.
		Concurrency: cc.MaxConcurrency,
		Fence:       fence,
	})
	if err != nil {
		return fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	ct.parts.add(eventsPart{fw, cc.Name})
	return nil
}

func (ct *controller) start(parent context.Context, logger log.Logger) {
	ctx, cancel := context.WithCancel(parent)
	ct.cancel, ct.used = cancel, true
	for _, p := range ct.parts.all {
		ct.done.Add(1)
		go func() { defer ct.done.Done(); p.run(ctx, logger) }()
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

func hasController(cfg *config.Config, name string) bool {
	for _, c := range cfg.Controllers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func (d *Daemon) stopControllers() {
	d.mu.Lock()
	ctrls := d.controllers
	d.controllers = nil
	d.mu.Unlock()
	d.stopAll(ctrls)
}

// stopAll stops ctrls side by side.
func (d *Daemon) stopAll(ctrls []*controller) {
	var wg sync.WaitGroup
	for _, ct := range ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d.beforeStop != nil {
				d.beforeStop(ct.cfg.Name)
			}
			ct.stop()
		}()
	}
	wg.Wait()
}
