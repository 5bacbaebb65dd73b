// Package config holds the YAML configuration of veil-exporter: schema, defaults,
// strict parsing, validation and secrets.
//
// Owns every default and bound of a setting: the other packages take a loaded Config as it is.
// Imports nothing of this module.
package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// Config is the whole configuration file (README: Configuration).
type Config struct {
	Controllers []Controller `yaml:"controllers"`
	Collect     Collect      `yaml:"collect"`
	Guest       Guest        `yaml:"guest"`
	Events      Events       `yaml:"events"`
	NATS        NATS         `yaml:"nats"`
	HA          HA           `yaml:"ha"`
	SD          SD           `yaml:"sd"`
}

// SD configures HTTP service discovery of guests (/sd/domains).
type SD struct {
	// Port is the port of the targets handed to Prometheus when the request gives none: the
	// port of what runs in the guests (node_exporter's 9100).
	Port int `yaml:"port"`
	// AllowedNetworks are the CIDRs (or single addresses) a target's address must be in to be
	// handed to Prometheus: guests choose the addresses they report. Empty: any address but
	// loopback, link-local, multicast and unspecified ones (never a guest's to be scraped at,
	// and what a hostile guest would point scrapes at: the Prometheus host, cloud metadata).
	AllowedNetworks []string `yaml:"allowed_networks"`
}

// Networks are AllowedNetworks parsed (a validated config's parse without error).
func (s SD) Networks() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.AllowedNetworks))
	for _, n := range s.AllowedNetworks {
		if p, err := parseNetwork(n); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseNetwork reads a CIDR, or an address as the network of that address alone.
func parseNetwork(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%s is wider than the IPv4-mapped range", s)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Controller is one platform controller to collect from.
type Controller struct {
	Name                 string        `yaml:"name"`
	URL                  string        `yaml:"url"`
	Token                Secret        `yaml:"token"`
	TokenFile            string        `yaml:"token_file"`
	TLS                  TLS           `yaml:"tls"`
	Timeout              time.Duration `yaml:"timeout"`
	MaxConcurrency       int           `yaml:"max_concurrency"`
	MaxRequestsPerSecond float64       `yaml:"max_requests_per_second"`
}

// TLS configures the connection to a controller.
type TLS struct {
	CAFile             string `yaml:"ca_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Collect configures inventory collection.
type Collect struct {
	Interval time.Duration `yaml:"interval"`
	// Push takes inventory changes from the controller's push channel (/ws/) as they happen;
	// then nodes, clusters, datapools and VMs are listed in full only every ResyncInterval
	// (and after every reconnect of the channel). A controller without the channel is polled.
	Push           bool          `yaml:"push"`
	ResyncInterval time.Duration `yaml:"resync_interval"`
	Nodes          bool          `yaml:"nodes"`
	Clusters       bool          `yaml:"clusters"`
	Datapools      bool          `yaml:"datapools"`
	Domains        bool          `yaml:"domains"`
	Tasks          bool          `yaml:"tasks"`
	Vdisks         bool          `yaml:"vdisks"`     // GET /api/vdisks/
	Interfaces     bool          `yaml:"interfaces"` // GET /api/vmachine-infs/
	// DeviceDetailsInterval, when above 0, reads the detail of every disk and interface once
	// per interval, paced evenly (one request per object): a disk's bus, type and snapshots,
	// an interface's link state, which the lists lack. 0 (the default): never.
	DeviceDetailsInterval time.Duration `yaml:"device_details_interval"`
	DomainInclude         Regexp        `yaml:"domain_include"`
	DomainExclude         Regexp        `yaml:"domain_exclude"`
	// BackupTaskPattern is a regexp on task names: the tasks that are backups of their VM.
	BackupTaskPattern Regexp `yaml:"backup_task_pattern"`
	// BackupLookback is how far back the task journal is read at start for the last backups
	// (Prometheus duration syntax: 7d, 36h).
	BackupLookback model.Duration `yaml:"backup_lookback"`
}

// Guest configures guest-agent checks.
type Guest struct {
	Enabled        bool          `yaml:"enabled"`
	PingInterval   time.Duration `yaml:"ping_interval"`
	OSInfoInterval time.Duration `yaml:"osinfo_interval"`
	FSInfoInterval time.Duration `yaml:"fsinfo_interval"`
	TimeInterval   time.Duration `yaml:"time_interval"`
	CommandTimeout time.Duration `yaml:"command_timeout"`
	Concurrency    int           `yaml:"concurrency"`
	FSTypesExclude []string      `yaml:"fs_types_exclude"`
	// FSMountpointsExclude is a regexp on mount points left out of the filesystem metrics.
	FSMountpointsExclude Regexp `yaml:"fs_mountpoints_exclude"`
	// NetworkInterval is how often guest-network-get-interfaces counters are read.
	NetworkInterval time.Duration `yaml:"network_interval"`
	// NetworkInterfacesExclude is a regexp on guest interface names left out.
	NetworkInterfacesExclude Regexp `yaml:"network_interfaces_exclude"`
	// StatsInterval is how often guest-get-diskstats, guest-get-cpustats and guest-get-load
	// are read, from the guests that offer them; 0: never (their series are about half of a
	// Linux guest's).
	StatsInterval time.Duration `yaml:"stats_interval"`
	// DiskDevicesExclude is a regexp on guest disk names (guest-get-diskstats) left out.
	DiskDevicesExclude Regexp `yaml:"disk_devices_exclude"`
}

// Events configures the event forwarder.
type Events struct {
	Enabled      bool          `yaml:"enabled"`
	PollInterval time.Duration `yaml:"poll_interval"`
	PageSize     int           `yaml:"page_size"`
	Order        string        `yaml:"order"` // auto | newest_first | oldest_first
	Start        string        `yaml:"start"` // latest | earliest
	Checkpoint   Checkpoint    `yaml:"checkpoint"`
}

// Checkpoint says where the event position is stored.
type Checkpoint struct {
	Store string `yaml:"store"` // file | nats_kv
	Dir   string `yaml:"dir"`
}

// NATS configures the connection events are published on.
type NATS struct {
	URL           string    `yaml:"url"`
	CredsFile     string    `yaml:"creds_file"`
	NKeyFile      string    `yaml:"nkey_file"`
	User          string    `yaml:"user"`
	Password      Secret    `yaml:"password"`
	TLS           NATSTLS   `yaml:"tls"`
	SubjectPrefix string    `yaml:"subject_prefix"`
	JetStream     JetStream `yaml:"jetstream"`
	Embedded      Embedded  `yaml:"embedded"`
	Inventory     Inventory `yaml:"inventory"`
	// Configured says the file has a nats: section. Then NATS is used even with events and
	// replicas off: the inventory bucket is written (unless nats.inventory.enabled is false).
	Configured bool `yaml:"-"`
}

// Inventory configures the inventory on NATS: every node, cluster, datapool and VM of the
// controllers a replica runs, in a JetStream KV bucket (written whenever NATS is used with
// JetStream: a nats: section, events or ha on).
type Inventory struct {
	Enabled bool   `yaml:"enabled"`
	Bucket  string `yaml:"bucket"`
	// History is how many values of each key the bucket keeps (1..64).
	History int `yaml:"history"`
}

// InventoryOnNATS says whether the inventory bucket is written: JetStream and the bucket on, and
// NATS used (a nats: section, events or replicas).
func (c *Config) InventoryOnNATS() bool {
	n := c.NATS
	return n.JetStream.Enabled && n.Inventory.Enabled && (n.Configured || c.Events.Enabled || c.HA.Enabled)
}

// UsesNATS says whether anything of c needs a NATS connection: the event forwarder, the
// replicas' leases or the inventory bucket.
func (c *Config) UsesNATS() bool { return c.Events.Enabled || c.HA.Enabled || c.InventoryOnNATS() }

// NATSTLS configures TLS towards NATS.
type NATSTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// JetStream configures publishing with acknowledgements.
type JetStream struct {
	Enabled         bool          `yaml:"enabled"`
	Stream          string        `yaml:"stream"`
	CreateStream    bool          `yaml:"create_stream"`
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	PublishTimeout  time.Duration `yaml:"publish_timeout"`
	MaxPending      int           `yaml:"max_pending"`
}

// Embedded runs a NATS server inside the daemon.
type Embedded struct {
	Enabled  bool     `yaml:"enabled"`
	Listen   string   `yaml:"listen"`
	StoreDir string   `yaml:"store_dir"`
	Sync     DiskSync `yaml:"sync"`
}

// DiskSync is when JetStream syncs its files to disk: after every write (Always) or every
// Interval. JetStream acknowledges a message before it syncs it, so a power loss of the host
// drops what was acknowledged since the last sync.
type DiskSync struct {
	Always   bool
	Interval time.Duration
	err      error // why the text read was neither; validation reports it
}

// ParseDiskSync reads "always" or a Go duration ("1s", "2m").
func ParseDiskSync(s string) (DiskSync, error) {
	if s == "always" {
		return DiskSync{Always: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return DiskSync{}, fmt.Errorf("%q is neither always nor a duration like 1s or 2m", s)
	}
	if d <= 0 {
		return DiskSync{}, fmt.Errorf("%q: the interval must be > 0 (or say always)", s)
	}
	return DiskSync{Interval: d}, nil
}

// String is the YAML form: "always" or the interval.
func (s DiskSync) String() string {
	if s.Always {
		return "always"
	}
	return s.Interval.String()
}

// UnmarshalYAML takes the text; an invalid one is kept for validation, which names its line.
func (s *DiskSync) UnmarshalYAML(n *yaml.Node) error {
	var text string
	if err := n.Decode(&text); err != nil {
		return err
	}
	v, err := ParseDiskSync(text)
	v.err = err
	*s = v
	return nil
}

// MarshalYAML writes the form UnmarshalYAML reads.
func (s DiskSync) MarshalYAML() (any, error) { return s.String(), nil }

// check says why s is no setting: its text was neither form, or the interval is not > 0.
func (s DiskSync) check() error {
	if s.err != nil || s.Always {
		return s.err
	}
	_, err := ParseDiskSync(s.String())
	return err
}

// Secret is a string that never prints itself.
type Secret string

// String hides the value; use string(s) where the value is really needed.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<secret>"
}

// MarshalYAML keeps secrets out of dumped configs.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// Default returns the configuration with every default (README: Configuration) and no controllers.
func Default() Config {
	return Config{
		Collect: Collect{
			Interval: 30 * time.Second, Push: true, ResyncInterval: 5 * time.Minute, Nodes: true, Clusters: true, Datapools: true, Domains: true, Tasks: true, Vdisks: true, Interfaces: true,
			BackupTaskPattern: MustRegexp(`(?i)backup|резерв`), BackupLookback: model.Duration(7 * 24 * time.Hour),
		},
		Guest: Guest{
			Enabled: true, PingInterval: 30 * time.Second, OSInfoInterval: 10 * time.Minute,
			FSInfoInterval: time.Minute, TimeInterval: 5 * time.Minute, CommandTimeout: 5 * time.Second,
			Concurrency:              8,
			FSTypesExclude:           []string{"tmpfs", "devtmpfs", "overlay", "squashfs", "proc", "sysfs", "cgroup", "cgroup2"},
			FSMountpointsExclude:     MustRegexp(`^/(dev|proc|run|sys|snap|var/lib/(docker|kubelet|containers))($|/)`),
			NetworkInterval:          time.Minute,
			NetworkInterfacesExclude: MustRegexp(`^lo$`),
			StatsInterval:            time.Minute,
			// node_exporter's diskstats default: RAM disks, loop and floppy devices, partitions.
			DiskDevicesExclude: MustRegexp(`^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$`),
		},
		Events: Events{
			Enabled: true, PollInterval: 5 * time.Second, PageSize: 100, Order: "auto", Start: "latest",
			Checkpoint: Checkpoint{Store: "file", Dir: "/var/lib/veil-exporter"},
		},
		NATS: NATS{
			URL: "nats://127.0.0.1:4222", SubjectPrefix: "veil.events",
			Inventory: Inventory{Enabled: true, Bucket: "VEIL_INVENTORY", History: 1},
			JetStream: JetStream{Enabled: true, Stream: "VEIL_EVENTS", CreateStream: true, DuplicateWindow: time.Hour, PublishTimeout: 5 * time.Second, MaxPending: 1000},
			Embedded:  Embedded{Listen: "127.0.0.1:4222", StoreDir: "/var/lib/veil-exporter/nats", Sync: DiskSync{Interval: time.Second}},
		},
		HA: defaultHA(),
		SD: SD{Port: 9100},
	}
}

// The defaults applied to every controller entry that leaves a field empty.
const (
	defaultControllerTimeout     = 10 * time.Second
	defaultControllerConcurrency = 8
	defaultControllerRate        = 50
)
