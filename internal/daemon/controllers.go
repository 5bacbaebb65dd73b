// This file holds what runs for one platform controller: its API client, inventory, guest
// checker and forwarder, built from its settings (build.go) and started and stopped as one.

package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/veil"
)

// controller is everything that runs for one platform controller.
type controller struct {
	cfg      config.Controller
	settings settings              // what it was built from; a reload keeps it while these stay equal
	api      *collector.APIMetrics // its request metrics, shared with the controllers built before it
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
