// Package veiltest is a simulator of the ECP VeiL platform REST API, in the spirit of
// net/http/httptest: New starts a real HTTP server on 127.0.0.1 with a generated, seeded
// inventory (nodes, clusters, datapools, domains), a task journal and an event journal, and
// methods to drive scenarios (power a VM off, add events, inject faults, read the request log).
//
// Behaviour chosen where the spec leaves room (documented here because clients depend on it):
//   - State-changing operations create a task that runs for Options.TaskDuration. With ?async=1
//     they answer 202 with {"_task":{...},"_entity":{...}} (or only "_task" for remove and
//     backup). Without it they wait until the task is final and answer 200 with the resource
//     (start, shutdown, template, ssh-inject → the VM; clone → the created VM; ballooning →
//     the node; remove, backup → the final task), or 400 with the error of a failed task.
//   - Tasks are named as the platform names them: a sentence naming the entities ("Starting
//     the virtual machine win_test."), verbose_name "Task"; the detail lists the task's journal
//     events. Every operation writes an event when its task is created and one when it
//     finishes or fails, each with task and entities set.
//   - EventRate drives background activity in journal events per second: operations on VMs
//     no client or control call has touched (start/stop, backups, clones and their removal,
//     migrations) run as tasks, and guest agents stop answering and come back (activity.go).
//   - Clone takes domains_ids (ids the client chose) and count; with count > 1 the VMs are
//     named verbose_name-1, -2... and made by a multitask (is_multitask) with one task per VM
//     (parent set). GET /api/tasks/<id>/response/ answers the operation's result (the new VM,
//     or the list of them), 400 while the task runs or when it failed.
//   - Accept-Language ru (the supported language of highest weight) gives Russian event
//     messages, task names and error texts; en, the default, English.
//   - An idempotency_key becomes the id of the task. A repeated key answers with the envelope
//     of the existing task (200), and for start with the domain object.
//   - Filters: nodes cluster; domains node, cluster, datapool, resource_pool, template,
//     status, power_state, ids, name (a case-insensitive substring of verbose_name); data-pools
//     node, cluster; tasks parent, status; events type, user, task. A value that names nothing
//     (an unknown id, an invalid boolean) gives an empty list, not an error. Every collection
//     takes ordering=<field>[,-<field>] on its list fields (unknown fields are ignored), and
//     every collection and detail takes fields=<key>,<key> to return only those keys.
//   - Error codes: "50004" not found, "401", "403", "405", "invalid"/"required" for field
//     errors, "400" for rule violations, "500"/"503"/"418" for injected faults.
//   - guest-exec answers {exitcode, out-data, exited, pid} at once (as the real agent does): a program in
//     the usual bin directories echoes its arguments, another path exits 127 with err-data;
//     guest-exec-status of the pid answers the same.
//   - A hung guest agent answers 400 with detail "guest agent timeout ..." after the command
//     timeout (fargs or body "timeout" seconds, default 5, bounded by the request).
//   - limit=0 returns an empty page with the right count; offset beyond count is an empty page.
//   - Time comes from Options.Now: with a frozen custom clock tasks only finish (and background
//     events only appear) when the clock moves, so synchronous operations wait until it does.
//   - The push channel GET /ws/?token=<token> (the token without "jwt "; the read-only one may
//     watch too) is a WebSocket (push.go). A refused token still upgrades, gets one text frame
//     {"msg_type": "text_msg", "text": "token error"} and a close frame 1008. "add <resource>"
//     and "delete <resource>" (/domains/, /nodes/, /clusters/, /data-pools/, /resource_pools/,
//     /tasks/) are acknowledged by {"msg_type": "control", "text": "<the command>"}, after which
//     every change comes under the new subscriptions (the controller's control frames are not
//     documented: do not depend on this one); anything else gets {"msg_type": "text_msg",
//     "text": "unknown command: ..."}. Each change of an object of a subscribed resource comes
//     as {"msg_type": "data", "resource", "event": "CREATED"|"UPDATED"|"DELETED", "id",
//     "object"}, object as its collection lists it (English texts; for DELETED, as it was).
//   - Changes are what the model does: VMs created (clone, AddVMs, the background's clones),
//     deleted, powered, migrated, made templates, their status (CREATING, DELETING) and guest
//     agent; nodes' counts of VMs, status and ballooning; datapools' VM disks, files and used
//     space; tasks created, passing each 25% of progress, and finished. Nothing renames a VM,
//     changes its tags, a cluster or a resource pool, so those never come. Changes made under
//     one lock of the state are sent once it is released, in the order they were made, each
//     object once, as it is then (a VM created and started at once comes as one CREATED);
//     a scenario method's (PowerOff, MigrateVM...) are out when it returns.
//   - A socket has a queue of 4096 frames; a client that lets it fill is dropped (the TCP
//     connection closed, no close frame), so no client holds the simulator up. Pings are
//     answered. Faults of kinds ws_refuse, ws_lose, ws_delay and ws_drop (Fault, SetFaults,
//     POST /_sim/faults) refuse upgrades with 404, lose, delay or drop frames; DropPushSockets
//     (POST /_sim/ws/drop) closes every socket at once; Options.NoPush serves no channel (404).
//   - Every VM has 1 to 3 virtual disks on its datapool (vdisks_count of them) and 1 or 2
//     network interfaces (GET /api/vdisks/, /api/vmachine-infs/, devices.go), drawn from a
//     source of their own: a clone gets disks of its source's sizes, a removed VM takes its
//     devices with it. A few free disks (one per 20 VMs, at least one per datapool) belong to
//     no VM; a datapool's vdisk_count counts every disk on it. About one disk in five has
//     snapshots, one interface in eight has its link down (link_state, detail only). Devices
//     are not pushed on /ws/. Options.NoDevices serves neither collection (404).
//   - Options.ChangeLog keeps the last N changes (Changes, GET /_sim/changes?since=N), each
//     with a number, its time and its object: a test can compare what a client stored with what
//     the simulator did. Off by default: a change costs one comparison while nothing records it.
//   - Bad input on request (poison.go; docs/events.md, "Bad input"): AddPoisonEvent (POST /_sim/events/poison)
//     writes one event a forwarder cannot publish as it is (a huge detail_message, a long type,
//     no id, a bad, null or missing created, dated in the future), in the journal at its place
//     in its bad wire form; an event written after a future-dated one goes before it, as
//     ordering by created puts it. SetOddFields (POST /_sim/odd_fields) gives one object of any
//     collection a field of an unexpected value in its listing, detail and push frames.
//     SetGuestHostile (POST /_sim/domains/<id>/guest_hostile) makes a VM's agent answer a
//     command with thousands of elements, overlong strings, wrong types or any JSON.
//
// Owns the simulator; imports nothing of this module, so its answers never follow the client.
package veiltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a simulated controller. Zero values mean the documented defaults.
type Options struct {
	Token         string // default "sim-token"; clients send "Authorization: jwt <Token>"
	ReadOnlyToken string // default none; GETs are allowed, POST/PUT answer 403
	Seed          int64  // deterministic inventory, names and ids

	Nodes, Clusters, Datapools, VMs int // defaults 3, 1, 2, 10 when zero; -1 means none
	Templates                       int // how many VMs are templates (default VMs/20; -1 none)

	// RunningFraction of VMs are powered on, AgentFraction of VMs have a guest agent (so
	// that fraction of running VMs report qemu_state true), LinuxFraction are Linux guests.
	// Defaults 0.8, 0.9, 0.8; a negative value means 0.
	RunningFraction, AgentFraction, LinuxFraction float64

	// Usage percentages (cpu_used_percent_user, mem_used_percent_user) of nodes, clusters and
	// domains are decimal strings ("12.50"), as the vendor's Go client expects; PercentNumbers
	// sends JSON numbers instead. StringPercentNodes, when set, mixes the two on nodes: that
	// fraction of nodes sends strings, the others numbers (negative: none sends strings).
	PercentNumbers     bool
	StringPercentNodes float64

	InitialEvents   int           // events already in the journal at start
	InitialTasks    int           // finished tasks already in the journal (default 20; -1 none)
	EventRate       float64       // background activity, in journal events per second (0 = none)
	EventsOrder     string        // default ordering of /api/events/: "newest_first" (default) or "oldest_first"
	EventsRetention int           // keep at most N events (0 = unlimited); oldest are deleted
	TaskDuration    time.Duration // how long a task takes (default 300ms); progress grows over it
	TaskFailureRate float64       // fraction of tasks that end FAILED without changing state

	Latency, LatencyJitter time.Duration // added to every /api/ request
	FaultRate              float64       // fraction of /api/ requests answered with a random 500/503/418

	// Profile chooses between the shapes the vendor's clients show where the platform is
	// inconsistent (the vendor's own clients disagree on them): ProfileDefault ("default") or ProfileAlternative
	// ("alternative": envelopes carry "entity" as a uuid instead of "_entity", usage
	// percentages are numbers, domains have a resource_pool object and tags as strings
	// instead of {colour, verbose_name}, the domain detail has uptime_on_current_node as an
	// object, cpu_topology.cpu_count without cpu_count, and permissions as an object).
	Profile string

	// GuestCommandsWindows lets guest-command run on Windows guests; the spec says Linux only.
	GuestCommandsWindows bool

	// ControllerVersion is what GET /api/controllers/base-version/ answers (default
	// DefaultControllerVersion); NoControllerVersion makes it a 404, as on a controller older
	// than the endpoint.
	ControllerVersion string

	// NoPush serves no push channel: GET /ws/ answers 404, as a controller without one does.
	NoPush bool
	// NoDevices serves neither /api/vdisks/ nor /api/vmachine-infs/ (404), as a controller
	// older than those collections.
	NoDevices bool
	// ChangeLog keeps the last N changes the simulator made to its objects, each with its
	// object's JSON, for Changes and GET /_sim/changes (0: none kept).
	ChangeLog int

	Now func() time.Time // clock (default time.Now)
}

// The profiles of Options.Profile.
const (
	ProfileDefault     = "default"
	ProfileAlternative = "alternative"
)

// Values of Options.ControllerVersion.
const (
	DefaultControllerVersion = "6.1.3"
	NoControllerVersion      = "none"
)

func (o Options) withDefaults() Options {
	if o.Profile != ProfileAlternative {
		o.Profile = ProfileDefault
	} else {
		o.PercentNumbers = true
	}
	if o.Token == "" {
		o.Token = "sim-token"
	}
	def := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def(&o.Nodes, 3)
	def(&o.Clusters, 1)
	def(&o.Datapools, 2)
	def(&o.VMs, 10)
	if o.Templates == 0 {
		o.Templates = o.VMs / 20
	}
	if o.Templates < 0 {
		o.Templates = 0
	}
	if o.Templates > o.VMs {
		o.Templates = o.VMs
	}
	if o.Clusters > o.Nodes && o.Nodes > 0 {
		o.Clusters = o.Nodes
	}
	def(&o.InitialTasks, 20)
	frac := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		case *v > 1:
			*v = 1
		}
	}
	frac(&o.RunningFraction, 0.8)
	frac(&o.AgentFraction, 0.9)
	frac(&o.LinuxFraction, 0.8)
	if o.EventsOrder != "oldest_first" {
		o.EventsOrder = "newest_first"
	}
	if o.TaskDuration <= 0 {
		o.TaskDuration = 300 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ControllerVersion == "" {
		o.ControllerVersion = DefaultControllerVersion
	}
	return o
}

// Server is a running simulated controller.
type Server struct {
	URL   string // base URL like http://127.0.0.1:PORT, no trailing slash
	Token string // the full-rights token (without the "jwt " prefix)

	opts    Options
	handler http.Handler
	// table serves every route of routes.go; apiRoutes and controlRoutes are those routes.
	table                    *http.ServeMux
	apiRoutes, controlRoutes []route
	srv                      *http.Server
	stop                     chan struct{}
	wg                       sync.WaitGroup
	close                    sync.Once

	mu      sync.Mutex // guards everything below up to the request log
	st      state
	version string // of the controller, or NoControllerVersion

	faultMu   sync.Mutex
	faultRand *rand.Rand
	faults    []*activeFault
	latency   time.Duration
	jitter    time.Duration

	oddMu sync.Mutex
	odd   oddTable // odd fields of objects (poison.go); nil: none

	pushQueueLen int            // frames a socket of /ws/ may have waiting (pushQueueLen)
	pushWG       sync.WaitGroup // the sockets' handlers, which Close waits for

	logMu       sync.Mutex
	log         []Request
	logNext     int
	logFull     bool
	inFlight    atomic.Int64
	inFlightMax atomic.Int64
}

// requestLogSize bounds the request log (a ring of the most recent requests).
const requestLogSize = 200_000

// New returns a simulator listening on 127.0.0.1 on a free port.
func New(opts Options) *Server {
	s := NewUnstarted(opts)
	s.Start()
	return s
}

// NewUnstarted builds the simulator without listening; call Start or StartOn, or serve
// Handler under your own listener. Close must be called in every case: it stops the
// background task and event loop.
func NewUnstarted(opts Options) *Server {
	o := opts.withDefaults()
	s := &Server{
		Token:     o.Token,
		opts:      o,
		stop:      make(chan struct{}),
		faultRand: rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed_fa17)),
		latency:   o.Latency,
		jitter:    o.LatencyJitter,
		version:   o.ControllerVersion,

		pushQueueLen: pushQueueLen,
	}
	s.st.init(o)
	s.handler = s.routes()
	s.wg.Add(1)
	go s.loop()
	return s
}

// Start listens on 127.0.0.1 on a free port. It panics if it cannot listen, like httptest.
func (s *Server) Start() {
	if err := s.StartOn("127.0.0.1:0"); err != nil {
		panic(fmt.Sprintf("veiltest: failed to listen: %v", err))
	}
}

// StartOn listens on addr and serves in the background.
func (s *Server) StartOn(addr string) error {
	if s.srv != nil {
		return errors.New("veiltest: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("couldn't listen on %s: %w", addr, err)
	}
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return nil
}

// Handler is the simulator's HTTP handler (the API under /api/ and the control API under /_sim/).
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the server, the background loop and waits for them.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.stop)
		s.closePush()
		if s.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = s.srv.Shutdown(ctx)
			cancel()
			_ = s.srv.Close()
		}
		s.wg.Wait()
	})
}

func (s *Server) now() time.Time { return s.opts.Now() }

// loop finishes due tasks and generates background events, and sends out the changes made
// (changes.go); requests also advance the state lazily, so a custom clock works without the loop.
func (s *Server) loop() {
	defer s.wg.Done()
	tick := s.opts.TaskDuration / 10
	tick = min(max(tick, 5*time.Millisecond), 50*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			s.st.advance(s.now())
			s.flushChanges()
			s.mu.Unlock()
		case <-s.st.feed.kick:
			s.mu.Lock()
			s.flushChanges()
			s.mu.Unlock()
		}
	}
}
