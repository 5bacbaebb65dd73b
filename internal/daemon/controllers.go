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
	cfg       config.Controller
	settings  settings         // what it was built from; a reload keeps it while these stay equal
	inventory *inventory.Store // also parts[0]: the guest checker reads its domains
	// parts are its components (components.go): the inventory, then the guest checker and the
	// event forwarder when they are on.
	parts  []component
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
func (d *Daemon) buildController(cfg *config.Config, cc config.Controller, conn *natsLink) (*controller, error) {
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
	inv, err := inventory.NewStore(cc.Name, client, cfg.Collect, log.With(d.base, "component", "inventory"))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	ct := &controller{cfg: cc, settings: settingsOf(cfg, cc), inventory: inv, parts: []component{inventoryPart{inv, collector.NewInventory(inv, d.renderer)}}}
	if cfg.Collect.Push {
		feed := inventory.NewPushFeed(cc.Name, client, inv, cfg.Collect.ResyncInterval, log.With(d.base, "component", "push"))
		ct.parts = append(ct.parts, pushPart{feed})
	}
	if conn != nil && cfg.NATS.JetStream.Enabled && cfg.NATS.Inventory.Enabled {
		var fence func() bool
		if cfg.HA.Enabled {
			fence = func() bool { l := ct.lease.Load(); return l != nil && l.Held() }
		}
		w, err := changefeed.New(changefeed.Options{
			Controller: cc.Name, Conn: conn.Conn, Config: cfg.NATS.Inventory, Replicas: replicasOf(cfg),
			Fence: fence, Resync: inv.Resync, Logger: d.base,
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
		}
		inv.SetObserver(w)
		ct.parts = append(ct.parts, kvPart{w})
	}
	if cfg.Guest.Enabled {
		g := guest.NewChecker(cc.Name, client, cfg.Guest, inv, log.With(d.base, "component", "guest"), d.renderer)
		ct.parts = append(ct.parts, guestPart{g})
	}
	if cfg.Events.Enabled {
		var fence func() bool
		if cfg.HA.Enabled {
			// Nothing is published or saved once another replica may run the controller.
			fence = func() bool { l := ct.lease.Load(); return l != nil && l.Held() }
		}
		var stream *forwarder.Stream
		if conn != nil {
			stream = conn.stream
		}
		fw, err := forwarder.New(forwarder.Options{
			Controller: cc.Name, ControllerURL: cc.URL, Client: client,
			Events: cfg.Events, Stream: stream, Logger: d.base, // adds component=events
			// Catch-up may read as many pages at once as the controller admits requests.
			Concurrency: cc.MaxConcurrency,
			Fence:       fence,
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
		}
		ct.parts = append(ct.parts, eventsPart{fw, cc.Name})
	}
	d.mu.Lock()
	d.apiMetrics[cc.Name] = api
	d.mu.Unlock()
	return ct, nil
}

func (ct *controller) start(parent context.Context, logger log.Logger) {
	ctx, cancel := context.WithCancel(parent)
	ct.cancel, ct.used = cancel, true
	for _, p := range ct.parts {
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
