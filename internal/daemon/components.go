package daemon

// A controller's components: the inventory, its push channel, the inventory on NATS, the guest
// checks and the event forwarder. Each satisfies component; what else it offers (rendered
// series, a part of the status page, problems, liveness, readiness, service discovery) it says
// by the capabilities below, which controller.add finds once, when the component is added.
// Adding a kind of work is adding one component here and adding it in buildController.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/guest"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/internal/web"
	"github.com/veil-exporter/veil-exporter/inventory"
)

// component is what every kind of work of a controller does.
type component interface {
	// run works until ctx is done.
	run(ctx context.Context, logger log.Logger)
	// RunStatus reports its runs (veil_collector_*, the status page's collectors).
	runstatus.Reporter
	// collectLive sends the families encoded at each scrape.
	collectLive(ch chan<- prometheus.Metric)
}

// The capabilities a component may have besides.
type (
	// renderedPart has series rendered once per change: rendered is the Set a scrape writes as
	// it is, collectRendered sends the same series encoded live, for name[] filters and the
	// protobuf text forms.
	renderedPart interface {
		rendered() *exposition.Set
		collectRendered(ch chan<- prometheus.Metric)
	}
	// viewer fills its part of the controller's status page.
	viewer interface{ view(c *web.Controller) }
	// problemSource lists what is wrong, by name, for the status page.
	problemSource interface{ Problems() []inventory.Problem }
	// liveness says why /-/healthy fails for it at now ("" while it does not).
	liveness interface{ unhealthy(now time.Time) string }
	// readiness says why /-/ready fails for it ("" while it does not).
	readiness interface{ notReady() string }
)

// Service discovery's capabilities are web.TargetSource (the inventory) and web.GuestSource
// (the guest checks).

// inventoryPart is the inventory as a component. It owns the rule of when a refresh loop is
// stuck: no refresh started for stuck (the longest a refresh may run, inventory.RefreshLimit
// of a full listing, after which the next starts at once; plus an interval and a request
// timeout), counted from its own start.
type inventoryPart struct {
	*inventory.Store
	metrics *collector.Inventory // its metric view
	stuck   time.Duration
	started atomic.Int64 // Unix nanoseconds run began; 0 before
}

// run runs the store and its metric view, which renders each snapshot the store keeps.
func (p *inventoryPart) run(ctx context.Context, _ log.Logger) {
	p.started.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() { defer close(done); p.metrics.Run(ctx) }()
	p.Store.Run(ctx)
	<-done
}
func (p *inventoryPart) collectLive(ch chan<- prometheus.Metric)     { p.metrics.CollectLive(ch) }
func (p *inventoryPart) rendered() *exposition.Set                   { return p.metrics.Rendered() }
func (p *inventoryPart) collectRendered(ch chan<- prometheus.Metric) { p.metrics.CollectRendered(ch) }
func (p *inventoryPart) view(c *web.Controller)                      { c.Inventory = p.Status() }
func (p *inventoryPart) Problems() []inventory.Problem               { return p.Snapshot().Problems(time.Now()) }

func (p *inventoryPart) unhealthy(now time.Time) string {
	st := p.Status()
	if !st.LastStart.IsZero() && now.Sub(st.LastStart) > p.stuck {
		return fmt.Sprintf("no inventory refresh for %s", now.Sub(st.LastStart).Round(time.Second))
	}
	if started := p.started.Load(); st.LastStart.IsZero() && started != 0 && now.Sub(time.Unix(0, started)) > p.stuck {
		return "inventory never refreshed"
	}
	return ""
}

func (p *inventoryPart) notReady() string {
	if !p.metrics.Ready() {
		return "first inventory refresh not done"
	}
	return ""
}

// guestPart is the guest checker as a component.
type guestPart struct{ *guest.Checker }

func (p guestPart) run(ctx context.Context, _ log.Logger)       { p.Run(ctx) }
func (p guestPart) collectLive(ch chan<- prometheus.Metric)     { p.CollectLive(ch) }
func (p guestPart) rendered() *exposition.Set                   { return p.Rendered() }
func (p guestPart) collectRendered(ch chan<- prometheus.Metric) { p.CollectRendered(ch) }
func (p guestPart) view(c *web.Controller)                      { st := p.Status(); c.Guest = &st }

// pushPart is the inventory's push channel as a component; its part of the page says what the
// channel is (its mode, connected since when).
type pushPart struct{ *inventory.PushFeed }

func (p pushPart) run(ctx context.Context, _ log.Logger)   { p.Run(ctx) }
func (p pushPart) collectLive(ch chan<- prometheus.Metric) { p.Collect(ch) }
func (p pushPart) view(c *web.Controller)                  { st := p.Status(); c.Push = &st }

// kvPart is the inventory on NATS as a component.
type kvPart struct{ *changefeed.Writer }

func (p kvPart) run(ctx context.Context, _ log.Logger)   { p.Run(ctx) }
func (p kvPart) collectLive(ch chan<- prometheus.Metric) { p.Collect(ch) }
func (p kvPart) view(c *web.Controller)                  { st := p.Status(); c.KV = &st }

// eventsPart is the event forwarder as a component.
type eventsPart struct {
	*forwarder.Forwarder
	controller string
}

func (p eventsPart) run(ctx context.Context, logger log.Logger) {
	if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		level.Error(logger).Log("msg", "event forwarder stopped", "controller", p.controller, "err", err)
	}
}
func (p eventsPart) collectLive(ch chan<- prometheus.Metric) { p.Collect(ch) }
func (p eventsPart) view(c *web.Controller)                  { st := p.Status(); c.Events = &st }
func (p eventsPart) notReady() string {
	if why := p.NotReady(); why != "" {
		return "events are not forwarded: " + why
	}
	return ""
}
func (p eventsPart) unhealthy(time.Time) string {
	if fs := p.Status(); fs.Stopped {
		return "event forwarder stopped: " + fs.LastError
	}
	return ""
}

// parts are a controller's components and their capabilities, found once by add.
type parts struct {
	all       []component
	rendered  []renderedPart
	viewers   []viewer
	problems  []problemSource
	liveness  []liveness
	readiness []readiness
	targets   web.TargetSource // the inventory
	guests    web.GuestSource  // nil without guest checks
}

// add appends c and records what it offers.
func (ps *parts) add(c component) {
	ps.all = append(ps.all, c)
	if r, ok := c.(renderedPart); ok {
		ps.rendered = append(ps.rendered, r)
	}
	if v, ok := c.(viewer); ok {
		ps.viewers = append(ps.viewers, v)
	}
	if p, ok := c.(problemSource); ok {
		ps.problems = append(ps.problems, p)
	}
	if l, ok := c.(liveness); ok {
		ps.liveness = append(ps.liveness, l)
	}
	if r, ok := c.(readiness); ok {
		ps.readiness = append(ps.readiness, r)
	}
	if t, ok := c.(web.TargetSource); ok {
		ps.targets = t
	}
	if g, ok := c.(web.GuestSource); ok {
		ps.guests = g
	}
}
