// Building a controller (builder): its API client, inventory, push channel, inventory on NATS,
// guest checker and forwarder, from its settings alone, on the daemon's NATS connection, with
// what the daemon shares with every controller (its loggers, the renderer, each controller's API
// metrics, kept across reloads so that counters never reset). Building starts nothing.

package daemon

import (
	"fmt"

	"github.com/go-kit/log"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/guest"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// builder builds controllers. Run's goroutine uses it (and New's before Run).
type builder struct {
	base     log.Logger // without component: each component's logger adds its own
	renderer *exposition.Renderer
	// apiMetrics are each configured controller's request metrics, by name, reused by the
	// controllers built for it; forget drops those of controllers no longer configured.
	apiMetrics map[string]*collector.APIMetrics
}

// forget drops the API metrics of the controllers cfg does not list.
func (b *builder) forget(cfg *config.Config) {
	for name := range b.apiMetrics {
		if !hasController(cfg, name) {
			delete(b.apiMetrics, name)
		}
	}
}

// build constructs (without starting) the controllers of cfg.
func (b *builder) build(cfg *config.Config, conn *natsLink) ([]*controller, error) {
	var out []*controller
	for _, cc := range cfg.Controllers {
		ct, err := b.buildController(settingsOf(cfg, cc), conn)
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
func (b *builder) buildController(s settings, conn *natsLink) (*controller, error) {
	cc := s.Controller
	api := b.apiMetrics[cc.Name]
	if api == nil {
		api = collector.NewAPIMetrics(cc.Name, log.With(b.base, "component", "client"))
	}
	client, err := NewClient(cc, api)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	inv, err := inventory.NewStore(cc.Name, client, s.Collect, log.With(b.base, "component", "inventory"))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
	}
	ct := &controller{cfg: cc, settings: s}
	ct.parts.add(&inventoryPart{Store: inv, metrics: collector.NewInventory(inv, b.renderer), stuck: inventory.RefreshLimit(s.Collect.Interval, true) + s.Collect.Interval + cc.Timeout})
	var fence func() bool
	if s.Fenced {
		// Nothing is published or written once another replica may run the controller.
		fence = func() bool { l := ct.lease.Load(); return l != nil && l.Held() }
	}
	if s.Collect.Push {
		feed := inventory.NewPushFeed(cc.Name, client, inv, s.Collect.ResyncInterval, log.With(b.base, "component", "push"))
		ct.parts.add(pushPart{feed})
	}
	if conn != nil && s.InventoryOnNATS {
		w, err := changefeed.New(changefeed.Options{
			Controller: cc.Name, Conn: conn.Conn, Config: s.NATS.Inventory, Replicas: s.Replicas,
			Fence: fence, Resync: inv.Resync, Logger: b.base,
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", cc.Name, err)
		}
		inv.SetObserver(w)
		ct.parts.add(kvPart{w})
	}
	if s.Guest.Enabled {
		g := guest.NewChecker(cc.Name, client, s.Guest, inv, guest.Outputs{Logger: log.With(b.base, "component", "guest"), Renderer: b.renderer})
		ct.parts.add(guestPart{g})
	}
	if s.Events.Enabled {
		if err := b.addForwarder(ct, client, conn, fence); err != nil {
			return nil, err
		}
	}
	ct.api = api
	b.apiMetrics[cc.Name] = api
	return ct, nil
}

// addForwarder adds the event forwarder of ct's settings, publishing on conn's stream.
func (b *builder) addForwarder(ct *controller, client *veil.Client, conn *natsLink, fence func() bool) error {
	var stream *forwarder.Stream
	if conn != nil {
		stream = conn.stream
	}
	cc := ct.settings.Controller
	fw, err := forwarder.New(forwarder.Options{
		Controller: cc.Name, ControllerURL: cc.URL, Client: client,
		Events: ct.settings.Events, Stream: stream, Logger: b.base, // adds component=events
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
