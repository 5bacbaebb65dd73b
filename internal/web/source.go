// The supervisor as the web side sees it: Source, and the plain values it hands over.

package web

import (
	"net/netip"
	"time"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// Source is what the endpoints read of the supervisor; internal/daemon satisfies it. Every
// method answers from what the supervisor holds (never from a controller) and may be called
// from any goroutine.
type Source interface {
	// Reload reads the configuration again; an error says why it was refused.
	Reload() error
	// Unhealthy says why the exporter cannot recover without a restart at now ("" if it can).
	Unhealthy(now time.Time) string
	// NotReady says why the exporter is not ready ("" if it is).
	NotReady() string
	// Status is what the status page shows, as the components report it.
	Status() Status
	// Discovery is what /sd/domains answers from.
	Discovery() Discovery
	// RenderedSets are the controllers' rendered series a scrape writes as they are.
	RenderedSets() []*exposition.Set
}

// Status is the exporter as the status page shows it. The page redacts the URLs and caps the
// texts; nothing else of it holds a secret.
type Status struct {
	Version         string
	Started         time.Time
	ConfigFile      string
	LastReload      time.Time
	LastReloadError string
	NATS            *natsconn.Status // nil without a NATS connection
	Replicas        *ha.Status       // nil without replicas
	Controllers     []Controller     // the ones that run, in configuration order
}

// Controller is one running controller as its components report it; a component that is off
// leaves its part nil.
type Controller struct {
	Name, URL string
	Inventory collector.InventoryStatus
	Runs      []runstatus.Status
	Problems  []collector.Problem // unsorted: the page sorts them
	Push      *collector.PushStatus
	KV        *changefeed.Status
	Guest     *collector.GuestStatus
	Events    *forwarder.Status
}

// Discovery is what /sd/domains answers from.
type Discovery struct {
	Port        int            // sd.port: the targets' port when the request gives none
	Networks    []netip.Prefix // sd.allowed_networks
	Controllers []DiscoveryController
}

// DiscoveryController is one running controller's part of /sd/domains.
type DiscoveryController struct {
	Name    string
	Targets TargetSource
	Guests  GuestSource // nil without guest checks
}

// TargetSource is the inventory's VMs as service discovery lists them.
type TargetSource interface {
	Ready() bool // the first refresh is done
	GuestTargets() []collector.GuestTarget
}

// GuestSource is what the guest checks add to service discovery.
type GuestSource interface {
	OSIDs() map[string]string     // VM id → os_id
	GuestIPv6() map[string]string // VM id → a global IPv6 address of its interfaces
}
