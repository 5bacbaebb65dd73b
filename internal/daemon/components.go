package daemon

// A controller's components: the inventory, its push channel, the inventory on NATS, the guest
// checks and the event forwarder, each behind one interface, so that the daemon runs, collects,
// renders, reports and judges them in one loop over a controller's parts. Adding a kind of work
// is adding one component here and appending it in buildController.

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/veil-exporter/veil-exporter/inventory"
)

// component is one kind of work of a controller.
type component interface {
	// run works until ctx is done.
	run(ctx context.Context, logger log.Logger)
	runstatus.Reporter
	// collectLive sends the families encoded at each scrape.
	collectLive(ch chan<- prometheus.Metric)
	// rendered is the Set a scrape writes as it is (nil: none); collectRendered sends the same
	// series encoded live, for name[] filters and the protobuf text forms.
	rendered() *exposition.Set
	collectRendered(ch chan<- prometheus.Metric)
	// view adds the component's part to the controller's status page and its problems.
	view(cs *controllerStatus, ps *[]inventory.Problem)
	// unhealthy says why /-/healthy fails for it ("" if it does not); notReady the same for
	// /-/ready.
	unhealthy(h healthLimits) string
	notReady() string
}

// healthLimits is what judging a component's health needs from the daemon.
type healthLimits struct {
	now, started time.Time
	stuck        time.Duration // a refresh loop without a start for this long is stuck
}

// inventoryPart is the inventory as a component: the store and its metric view.
type inventoryPart struct {
	*inventory.Store
	metrics *collector.Inventory
}

func (p inventoryPart) run(ctx context.Context, _ log.Logger) {
	done := make(chan struct{})
	go func() { defer close(done); p.metrics.Run(ctx) }()
	p.Store.Run(ctx)
	<-done
}
func (p inventoryPart) collectLive(ch chan<- prometheus.Metric)     { p.metrics.CollectLive(ch) }
func (p inventoryPart) rendered() *exposition.Set                   { return p.metrics.Rendered() }
func (p inventoryPart) collectRendered(ch chan<- prometheus.Metric) { p.metrics.CollectRendered(ch) }
func (p inventoryPart) view(_ *controllerStatus, ps *[]inventory.Problem) {
	*ps = append(*ps, p.Snapshot().Problems(time.Now())...)
}

// unhealthy: a loop that has not started a refresh in four intervals plus a request timeout is
// stuck (a refresh is abandoned after three intervals, and the next starts at once).
func (p inventoryPart) unhealthy(h healthLimits) string {
	st := p.Status()
	if !st.LastStart.IsZero() && h.now.Sub(st.LastStart) > h.stuck {
		return fmt.Sprintf("no inventory refresh for %s", h.now.Sub(st.LastStart).Round(time.Second))
	}
	if st.LastStart.IsZero() && h.now.Sub(h.started) > h.stuck {
		return "inventory never refreshed"
	}
	return ""
}

func (p inventoryPart) notReady() string {
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
func (p guestPart) unhealthy(healthLimits) string               { return "" }
func (p guestPart) notReady() string                            { return "" }
func (p guestPart) view(cs *controllerStatus, ps *[]inventory.Problem) {
	cs.Guest = guestView(p.Status())
	*ps = append(*ps, p.Problems()...)
}

// pushPart is the inventory's push channel as a component.
type pushPart struct{ *inventory.PushFeed }

func (p pushPart) run(ctx context.Context, _ log.Logger)    { p.Run(ctx) }
func (p pushPart) collectLive(ch chan<- prometheus.Metric)  { p.Collect(ch) }
func (p pushPart) rendered() *exposition.Set                { return nil }
func (p pushPart) collectRendered(chan<- prometheus.Metric) {}
func (p pushPart) unhealthy(healthLimits) string            { return "" }
func (p pushPart) notReady() string                         { return "" }
func (p pushPart) view(cs *controllerStatus, _ *[]inventory.Problem) {
	cs.Inventory.Push = pushView(p.Status())
}

// kvPart is the inventory on NATS as a component.
type kvPart struct{ *changefeed.Writer }

func (p kvPart) run(ctx context.Context, _ log.Logger)    { p.Run(ctx) }
func (p kvPart) collectLive(ch chan<- prometheus.Metric)  { p.Collect(ch) }
func (p kvPart) rendered() *exposition.Set                { return nil }
func (p kvPart) collectRendered(chan<- prometheus.Metric) {}
func (p kvPart) unhealthy(healthLimits) string            { return "" }
func (p kvPart) notReady() string                         { return "" }
func (p kvPart) view(cs *controllerStatus, _ *[]inventory.Problem) {
	cs.Inventory.KV = kvView(p.Status())
}

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
func (p eventsPart) collectLive(ch chan<- prometheus.Metric)  { p.Collect(ch) }
func (p eventsPart) rendered() *exposition.Set                { return nil }
func (p eventsPart) collectRendered(chan<- prometheus.Metric) {}
func (p eventsPart) view(cs *controllerStatus, _ *[]inventory.Problem) {
	cs.Events = eventsView(p.Status())
}
func (p eventsPart) notReady() string {
	if why := p.NotReady(); why != "" {
		return "events are not forwarded: " + why
	}
	return ""
}
func (p eventsPart) unhealthy(healthLimits) string {
	if fs := p.Status(); fs.Stopped {
		return "event forwarder stopped: " + fs.LastError
	}
	return ""
}
