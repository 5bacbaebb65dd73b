// The daemon as internal/web reads it: its handler, and webSource, which answers the endpoints
// from the running controllers under d.mu, never from a controller itself.

package daemon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/web"
)

// HandlerOptions are the --web.* flags of the handler (web.HandlerOptions).
type HandlerOptions = web.HandlerOptions

// DefaultWriteTimeout is --web.write-timeout's default (web.DefaultWriteTimeout).
const DefaultWriteTimeout = web.DefaultWriteTimeout

// Handler serves every endpoint of the daemon.
func (d *Daemon) Handler(o HandlerOptions) http.Handler {
	return web.Handler(webSource{d}, d.metrics, d.logger, o)
}

// webSource is the daemon as web.Source: what the endpoints show, read from the running
// configuration under the daemon's mu.
type webSource struct{ d *Daemon }

func (s webSource) Reload() error { return s.d.Reload() }

// RenderedSets are the rendered series of every controller, in configuration order: what a
// scrape writes beside the live families.
func (s webSource) RenderedSets() []*exposition.Set {
	ctrls := s.d.exported()
	sets := make([]*exposition.Set, 0, 2*len(ctrls))
	for _, ct := range ctrls {
		for _, p := range ct.parts.rendered {
			if set := p.rendered(); set != nil {
				sets = append(sets, set)
			}
		}
	}
	return sets
}

// Unhealthy says why the daemon is not live at now, or "".
func (s webSource) Unhealthy(now time.Time) string {
	d := s.d
	d.mu.RLock()
	ctrls, cfg, conn, reloadErr, rs := d.controllers, d.cfg, d.conn, d.rec.err, d.replicas
	d.mu.RUnlock()
	// A replica that runs nothing (the others hold every lease) is healthy: restarting it mends nothing.
	if len(ctrls) == 0 && rs == nil || cfg == nil {
		if reloadErr != "" {
			return "no controller runs; last reload: " + reloadErr
		}
		return "no controller runs"
	}
	if cfg.Events.Enabled && conn == nil {
		return "events are not forwarded: the NATS connection was lost in a failed reload"
	}
	if conn != nil && conn.Conn != nil {
		if why := conn.LostReason(); why != "" {
			return "the NATS connection was closed for good by a server error (" + why + ")"
		}
	}
	for _, ct := range ctrls {
		for _, p := range ct.parts.liveness {
			if why := p.unhealthy(now); why != "" {
				return fmt.Sprintf("controller %s: %s", ct.cfg.Name, why)
			}
		}
	}
	return ""
}

// NotReady: every first refresh done, and NATS connected when forwarding; otherwise which
// controller waits and why.
func (s webSource) NotReady() string {
	d := s.d
	d.mu.RLock()
	ctrls, conn, cfg, rs := d.controllers, d.conn, d.cfg, d.replicas
	d.mu.RUnlock()
	if rs != nil {
		// With replicas, ready once the lease bucket was read: this replica then knows what it
		// runs, which may be nothing.
		if st := rs.coord.Status(); !st.Synced {
			why := "lease bucket " + st.Bucket + " not read yet"
			if st.LastError != "" {
				why += ": " + st.LastError
			}
			return why
		}
	} else if len(ctrls) == 0 {
		return "no controller runs"
	}
	// Forwarding is ready once every forwarder has NATS, its stream and its position store.
	for _, ct := range ctrls {
		for _, p := range ct.parts.readiness {
			if why := p.notReady(); why != "" {
				return fmt.Sprintf("controller %s: %s", ct.cfg.Name, why)
			}
		}
	}
	if cfg != nil && cfg.Events.Enabled && conn == nil {
		return "events are not forwarded: the NATS connection was lost in a failed reload"
	}
	return ""
}

// Status is what the status page shows of the daemon and each controller it runs.
func (s webSource) Status() web.Status {
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := web.Status{
		Version: d.version, Started: d.started, ConfigFile: d.configFile, LastReload: d.rec.last, LastReloadError: d.rec.err,
		Controllers: make([]web.Controller, 0, len(d.controllers)),
	}
	if d.conn != nil {
		st := d.conn.Status()
		out.NATS = &st
	}
	if d.replicas != nil {
		st := d.replicas.coord.Status()
		out.Replicas = &st
	}
	for _, ct := range d.controllers {
		c := web.Controller{Name: ct.cfg.Name, URL: ct.cfg.URL}
		for _, p := range ct.parts.all {
			c.Runs = append(c.Runs, p.RunStatus()...)
		}
		for _, p := range ct.parts.problems {
			c.Problems = append(c.Problems, p.Problems()...)
		}
		for _, p := range ct.parts.viewers {
			p.view(&c)
		}
		out.Controllers = append(out.Controllers, c)
	}
	return out
}

// Discovery is what /sd/domains answers from: sd.* of the running configuration (read at each
// request, so a reload changes them at once) and the controllers that run.
func (s webSource) Discovery() web.Discovery {
	d := s.d
	d.mu.RLock()
	ctrls, cfg := d.controllers, d.cfg
	d.mu.RUnlock()
	disc := web.Discovery{Port: 9100}
	if cfg != nil {
		disc.Port, disc.Networks = cfg.SD.Port, cfg.SD.Networks()
	}
	for _, ct := range ctrls {
		disc.Controllers = append(disc.Controllers, web.DiscoveryController{Name: ct.cfg.Name, Targets: ct.parts.targets, Guests: ct.parts.guests})
	}
	return disc
}
