// The status page's view types, shared by its HTML and its JSON, and their conversions from the
// components' own status structs.

package web

import (
	"encoding/json"
	"time"

	"github.com/veil-exporter/veil-exporter/changefeed"
	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/forwarder"
	"github.com/veil-exporter/veil-exporter/guest"
	"github.com/veil-exporter/veil-exporter/ha"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// The status page and its JSON (?format=json) share these types. They are converted from the
// packages' own status structs so the JSON keys stay snake_case and stable whatever those
// structs become. Nothing here holds a secret: URLs are redacted, tokens and passwords are
// never read.

type statusData struct {
	Version         string             `json:"version"`
	Started         time.Time          `json:"started"`
	ConfigFile      string             `json:"config_file"`
	LastReload      time.Time          `json:"last_reload,omitzero"`
	LastReloadError string             `json:"last_reload_error,omitempty"`
	NATS            *natsStatus        `json:"nats,omitempty"`     // nil when events are off
	Replicas        *replicasStatus    `json:"replicas,omitempty"` // nil without ha.enabled
	Controllers     []controllerStatus `json:"controllers"`        // those this replica runs
}

// replicasStatus is ha.Status: this replica, the live ones, and who runs each controller.
type replicasStatus struct {
	Instance    string        `json:"instance"`
	Bucket      string        `json:"bucket"`
	LeaseTTL    seconds       `json:"lease_ttl_seconds"`
	Synced      bool          `json:"synced"` // the bucket was read
	LastError   string        `json:"last_error,omitempty"`
	Instances   []string      `json:"instances"`
	Controllers []ownerStatus `json:"controllers"`
}

type ownerStatus struct {
	Controller string    `json:"controller"`
	Owner      string    `json:"owner"` // "" while no replica holds it
	Since      time.Time `json:"since,omitzero"`
	Mine       bool      `json:"mine"`
}

func replicasView(st ha.Status) *replicasStatus {
	r := &replicasStatus{Instance: st.Instance, Bucket: st.Bucket, LeaseTTL: seconds(st.LeaseTTL), Synced: st.Synced,
		LastError: st.LastError, Instances: []string{}, Controllers: []ownerStatus{}}
	for _, i := range st.Instances {
		r.Instances = append(r.Instances, i.ID)
	}
	for _, c := range st.Controllers {
		r.Controllers = append(r.Controllers, ownerStatus{Controller: c.Controller, Owner: c.Owner, Since: c.Since, Mine: c.Mine})
	}
	return r
}

type natsStatus struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
	Embedded  bool   `json:"embedded"`
	// The last error stays after the connection came back; last_error_at says when it was.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

type controllerStatus struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	State string `json:"state"` // up, down or starting (first refresh not done)
	// Version of the platform (GET /api/controllers/base-version/); "" until read or where the
	// controller lacks it.
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Problems: what is wrong, by name, failures first, at most maxProblems of ProblemsTotal.
	Problems      []problem         `json:"problems"`
	ProblemsTotal int               `json:"problems_total"`
	Inventory     inventoryStatus   `json:"inventory"`
	Collectors    []collectorStatus `json:"collectors"`       // the run status of each collector
	Guest         *guestStatus      `json:"guest,omitempty"`  // nil when guest checks are off
	Events        *eventsStatus     `json:"events,omitempty"` // nil when events are off
}

// problem is one object that is not as it should be (inventory.Problem).
type problem struct {
	Kind    string `json:"kind"` // node, datapool, nic, backup, guest, clock
	ID      string `json:"id"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Failure bool   `json:"failure"` // a failure, not a state such as a node in SERVICE
}

// maxProblems caps the problems listed per controller; the total is said.
const maxProblems = 25

func problemsView(ps []inventory.Problem) ([]problem, int) {
	out := make([]problem, 0, min(len(ps), maxProblems))
	for _, p := range ps[:min(len(ps), maxProblems)] {
		out = append(out, problem{Kind: p.Kind, ID: p.ID, Name: p.Name, State: p.State, Failure: p.Failure})
	}
	return out, len(ps)
}

type inventoryStatus struct {
	LastRefresh     time.Time      `json:"last_refresh,omitzero"`
	RefreshDuration seconds        `json:"refresh_duration_seconds"`
	AuthFailed      bool           `json:"auth_failed"`
	Nodes           int            `json:"nodes"`
	Clusters        int            `json:"clusters"`
	Datapools       int            `json:"datapools"`
	VMs             int            `json:"vms"`       // exported, after domain_include/exclude
	VMsTotal        int            `json:"vms_total"` // on the controller
	Tasks           map[string]int `json:"tasks"`     // by status
	// Push is how the inventory is kept fresh (nil: collect.push is off, polled).
	Push *pushStatus `json:"push,omitempty"`
	// KV is the inventory on NATS (nil: not written).
	KV *kvStatus `json:"kv,omitempty"`
}

// kvStatus is changefeed.Status: the inventory bucket as this replica writes it.
type kvStatus struct {
	Bucket    string    `json:"bucket"`
	Loaded    bool      `json:"loaded"` // read back at least once
	Keys      int       `json:"keys"`
	Pending   int       `json:"pending"`
	Writes    float64   `json:"writes"`
	LastWrite time.Time `json:"last_write,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

func kvView(s changefeed.Status) *kvStatus {
	return &kvStatus{Bucket: s.Bucket, Loaded: s.Loaded, Keys: s.Keys, Pending: s.Pending, Writes: s.Writes, LastWrite: s.LastWrite, LastError: s.LastError}
}

// pushStatus is inventory.PushStatus: the controller's push channel.
type pushStatus struct {
	Mode      string    `json:"mode"` // push, polling (the controller has none) or connecting
	Since     time.Time `json:"since"`
	Frames    float64   `json:"frames"`  // applied
	Dropped   float64   `json:"dropped"` // malformed or unknown
	LastFrame time.Time `json:"last_frame,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// pushView shows the channel as what it is: its mode and since when it holds it (while the
// socket is open, since it connected), never a last run.
func pushView(p inventory.PushStatus) *pushStatus {
	since := p.Since
	if !p.ConnectedSince.IsZero() {
		since = p.ConnectedSince
	}
	return &pushStatus{Mode: p.Mode, Since: since, Frames: p.Frames, Dropped: p.Dropped, LastFrame: p.LastFrame, LastError: p.LastError}
}

// collectorStatus is one runstatus.Status: the last run of one collector of the controller.
type collectorStatus struct {
	Collector string `json:"collector"`
	// State is ok, failing or unavailable (the controller lacks this collection: not an
	// outage, so the page shows it neutrally).
	State       string    `json:"state"`
	Success     bool      `json:"success"`
	Duration    seconds   `json:"duration_seconds"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	Error       string    `json:"error,omitempty"`
}

func collectorView(s runstatus.Status) collectorStatus {
	c := collectorStatus{Collector: s.Collector, State: "failing", Success: s.Success, Duration: seconds(s.Duration), LastSuccess: s.LastSuccess, Error: s.Error}
	switch {
	case s.Success:
		c.State = "ok"
	case s.Unavailable:
		c.State = "unavailable"
	}
	return c
}

type guestStatus struct {
	Eligible      int       `json:"eligible"`
	Checked       int       `json:"checked"`
	Unsupported   int       `json:"unsupported"`
	SweepDuration seconds   `json:"sweep_duration_seconds"`
	LastSweep     time.Time `json:"last_sweep,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	// The last failed command apart: the VM by name (and id), the command, the reason, and
	// whether that reason is a state of the guest rather than a failure.
	LastErrorDomain   string `json:"last_error_domain,omitempty"`
	LastErrorDomainID string `json:"last_error_domain_id,omitempty"`
	LastErrorCommand  string `json:"last_error_command,omitempty"`
	LastErrorReason   string `json:"last_error_reason,omitempty"`
	LastIsState       bool   `json:"last_error_is_state,omitempty"`
}

type eventsStatus struct {
	Subject     string    `json:"subject"`
	Order       string    `json:"order"`
	Position    time.Time `json:"position,omitzero"`
	PositionIDs []string  `json:"position_ids"`
	Backlog     int       `json:"backlog"`
	// Ahead: events published though dated after this machine's clock, remembered by id until
	// it passes them; HeldBack: such events left unpublished because as many are remembered as
	// may be (each goes out once the clock passes it).
	Ahead         int       `json:"ahead_of_clock"`
	HeldBack      int       `json:"held_back"`
	Published     uint64    `json:"published"`
	LastPublished time.Time `json:"last_published,omitzero"`
	Duplicates    uint64    `json:"duplicates_dropped"`
	Gaps          uint64    `json:"gaps"`
	// Gap episodes: times continuity with the stored position could not be proven (forwarder).
	GapEpisodes uint64      `json:"gap_episodes"`
	LastGap     *gapEpisode `json:"last_gap_episode,omitempty"`
	// StreamSeq: the stream sequence of the controller's newest message (0: none known).
	StreamSeq uint64 `json:"stream_sequence"`
	// Conflicts: publishes the stream refused; Rewinds: times the stream held less than the
	// stored position (the events in between published again).
	Conflicts  uint64        `json:"publish_conflicts"`
	Rewinds    uint64        `json:"rewinds"`
	LastRewind *rewind       `json:"last_rewind,omitempty"`
	NotReady   string        `json:"not_ready,omitempty"` // why events are not forwarded now
	LastError  string        `json:"last_error,omitempty"`
	Stopped    bool          `json:"stopped"` // another instance owns the position
	Recent     []recentEvent `json:"recent"`  // newest first
	// Rejected: events published in another form than the controller sent them, by reason
	// (veil_events_rejected_total), and the last of them, newest first.
	Rejected       map[string]uint64 `json:"rejected"`
	RecentRejected []rejectedEvent   `json:"recent_rejected"`
}

// rejectedEvent is one event published cut or to the invalid subject.
type rejectedEvent struct {
	At      time.Time `json:"at"`
	ID      string    `json:"id"`
	Reason  string    `json:"reason"`
	Subject string    `json:"subject"`
	Size    int       `json:"size"`
}

// gapEpisode: events created between After and Before may have been deleted unread.
type gapEpisode struct {
	At     time.Time `json:"at"`
	After  time.Time `json:"after"`
	Before time.Time `json:"before,omitzero"`
	Lost   uint64    `json:"lost_at_least"`
}

// rewind: NATS held events of this controller only up to To; the stored position was From.
type rewind struct {
	At   time.Time `json:"at"`
	From time.Time `json:"from"`
	To   time.Time `json:"to,omitzero"`
}

type recentEvent struct {
	Created time.Time `json:"created"`
	Type    string    `json:"type"`
	Subject string    `json:"subject"`
	ID      string    `json:"id"`
	Message string    `json:"message"`
}

// seconds is a duration that reads as seconds in JSON, like the metrics.
type seconds time.Duration

func (s seconds) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(s).Seconds()) }

// UnmarshalJSON reads what MarshalJSON wrote, so a client of the JSON can use these types.
func (s *seconds) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*s = seconds(f * float64(time.Second))
	return nil
}

// String rounds for people: milliseconds under a minute, seconds above.
func (s seconds) String() string {
	d := time.Duration(s)
	switch {
	case d <= 0:
		return "—"
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func natsView(c natsconn.Status) *natsStatus {
	// natsconn already strips credentials; redacting again costs nothing and keeps a
	// password out of the page should that ever change.
	return &natsStatus{URL: config.RedactURL(c.URL), Connected: c.Connected, Embedded: c.Embedded, LastError: c.LastError, LastErrorAt: c.LastErrorAt}
}

func controllerView(name, url string, inv inventory.Status) controllerStatus {
	cs := controllerStatus{
		Name: name, URL: url, State: "starting", Problems: []problem{}, Version: inv.Version,
		Inventory: inventoryStatus{
			LastRefresh: inv.LastAttempt, RefreshDuration: seconds(inv.LastDuration), AuthFailed: inv.AuthFailed,
			Nodes: inv.Nodes, Clusters: inv.Clusters, Datapools: inv.Datapools,
			VMs: inv.Domains, VMsTotal: inv.DomainsTotal, Tasks: inv.Tasks,
		},
		Collectors: []collectorStatus{}, // the components' runs, added by status()
	}
	switch {
	case inv.Up:
		cs.State = "up"
	case inv.Ready:
		cs.State, cs.Error = "down", inv.LastError
	}
	return cs
}

func guestView(g guest.Status) *guestStatus {
	return &guestStatus{Eligible: g.Eligible, Checked: g.Checked, Unsupported: g.Unsupported, SweepDuration: seconds(g.SweepDuration), LastSweep: g.LastSweep, LastError: g.LastError,
		LastErrorDomain: g.LastErrorDomain, LastErrorDomainID: g.LastErrorDomainID, LastErrorCommand: g.LastErrorCommand, LastErrorReason: g.LastErrorReason, LastIsState: g.LastIsState}
}

func eventsView(f forwarder.Status) *eventsStatus {
	e := &eventsStatus{
		Subject: f.Subject, Order: f.Order, Position: f.Position, PositionIDs: f.PositionIDs,
		Backlog: f.Backlog, Ahead: f.Ahead, HeldBack: f.HeldBack, Published: f.Published, LastPublished: f.LastAcked,
		Duplicates: f.Duplicates, Gaps: f.Gaps, GapEpisodes: f.GapEpisodes, NotReady: f.NotReady,
		LastError: f.LastError, Stopped: f.Stopped,
		Recent: make([]recentEvent, 0, len(f.Recent)),
	}
	e.StreamSeq, e.Conflicts, e.Rewinds = f.StreamSeq, f.Conflicts, f.Rewinds
	if r := f.LastRewind; !r.At.IsZero() {
		e.LastRewind = &rewind{At: r.At, From: r.From, To: r.To}
	}
	if g := f.LastGap; !g.At.IsZero() {
		e.LastGap = &gapEpisode{At: g.At, After: g.After, Before: g.Before, Lost: g.Lost}
	}
	if e.PositionIDs == nil {
		e.PositionIDs = []string{}
	}
	for _, r := range f.Recent {
		e.Recent = append(e.Recent, recentEvent{Created: r.Created, Type: r.Type, Subject: r.Subject, ID: r.ID, Message: r.Message})
	}
	e.Rejected, e.RecentRejected = map[string]uint64{}, make([]rejectedEvent, 0, len(f.RecentRejected))
	for k, n := range f.Rejected {
		if n > 0 {
			e.Rejected[k] = n
		}
	}
	for _, r := range f.RecentRejected {
		e.RecentRejected = append(e.RecentRejected, rejectedEvent{At: r.At, ID: r.ID, Reason: r.Reason, Subject: r.Subject, Size: r.Size})
	}
	return e
}
