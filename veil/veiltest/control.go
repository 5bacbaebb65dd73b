package veiltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// ---- scenario drivers: changes made "behind the API", as an operator or a failure would ----

func (s *Server) withDomain(id string, f func(d *domain, now time.Time) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flushChanges() // a scenario's changes are out when it returns
	now := s.now()
	s.st.advance(now)
	d, ok := s.st.domainByID[id]
	if !ok {
		return fmt.Errorf("virtual machine %s not found", id)
	}
	d.pinned = true // the background activity leaves a scenario's VM alone
	return f(d, now)
}

func (s *Server) powerEvent(d *domain, now time.Time, msg text) {
	s.st.newEvent(now, event{typ: "info", user: "system", msg: txtf("Virtual machine %s "+msg.en, "Виртуальная машина %s "+msg.ru, d.name), ents: []eventEntity{{d.id, "domain"}}})
}

// PowerOff powers a VM off (as if the guest shut itself down) and writes an event.
func (s *Server) PowerOff(vmID string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		s.st.setPower(d, powerOff, now)
		s.powerEvent(d, now, txt("is powered off", "выключена"))
		return nil
	})
}

// PowerOn powers a VM on and writes an event.
func (s *Server) PowerOn(vmID string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		if d.template {
			return fmt.Errorf("virtual machine %s is a template", d.name)
		}
		s.st.setPower(d, powerOn, now)
		s.powerEvent(d, now, txt("is powered on", "включена"))
		return nil
	})
}

// DeleteVM removes a VM at once (no task) and writes an event.
func (s *Server) DeleteVM(vmID string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		s.st.removeDomain(d)
		s.powerEvent(d, now, txt("is deleted", "удалена"))
		return nil
	})
}

// MigrateVM moves a VM to another node and writes an event.
func (s *Server) MigrateVM(vmID, nodeID string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		n, ok := s.st.nodeByID[nodeID]
		if !ok {
			return fmt.Errorf("node %s not found", nodeID)
		}
		s.st.moveDomain(d, n, now)
		s.powerEvent(d, now, txt("is migrated to node "+n.name, "перенесена на узел "+n.name))
		return nil
	})
}

// SetNodeStatus sets a node's status (ACTIVE, FAILED, SERVICE, ...), as when a host fails or
// is put into service mode, and writes the event the platform would.
func (s *Server) SetNodeStatus(nodeID, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flushChanges()
	now := s.now()
	s.st.advance(now)
	n, ok := s.st.nodeByID[nodeID]
	if !ok {
		return fmt.Errorf("node %s not found", nodeID)
	}
	n.status = status
	s.st.changed(ChangeUpdated, n)
	typ := "info"
	if status != "ACTIVE" {
		typ = "warning"
	}
	s.st.newEvent(now, event{typ: typ, user: "system", msg: txtf("Node %s status changed to %s", "Статус узла %s изменён на %s", n.name, status), ents: []eventEntity{{n.id, "node"}}})
	return nil
}

// SetGuestAgent connects (installing it if needed) or disconnects a VM's guest agent.
func (s *Server) SetGuestAgent(vmID string, running bool) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		if running {
			d.agent = true
		}
		d.agentUp = running
		s.st.changed(ChangeUpdated, d)
		return nil
	})
}

// SetGuestHang makes the VM's agent accept commands and never answer (they time out).
func (s *Server) SetGuestHang(vmID string, hang bool) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		d.hang = hang
		return nil
	})
}

// SetGuestCommandError makes the VM's agent answer cmd with an error carrying message, although
// it still offers the command (an agent that lists a command and then fails it: a disabled
// command, a /proc file it cannot read); an empty message makes it answer again.
func (s *Server) SetGuestCommandError(vmID, cmd, message string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		if message == "" {
			delete(d.cmdErrors, cmd)
			return nil
		}
		if d.cmdErrors == nil {
			d.cmdErrors = map[string]string{}
		}
		d.cmdErrors[cmd] = message
		return nil
	})
}

// SetClockOffset sets how far the guest clock is ahead (positive) of the simulator's clock.
func (s *Server) SetClockOffset(vmID string, off time.Duration) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		d.clockOffset = off
		return nil
	})
}

// SetTags replaces a VM's tags by the given names (none: no tags), as an operator tagging it
// in the controller's UI would.
func (s *Server) SetTags(vmID string, names ...string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		d.tagNames, d.tagsSet = append([]string(nil), names...), true
		s.st.changed(ChangeUpdated, d)
		return nil
	})
}

// SetGuestIPv6 gives the VM's guest interface these IPv6 addresses besides its link-local one
// (guest-network-get-interfaces); the platform's guest_utils lists IPv4 addresses only.
func (s *Server) SetGuestIPv6(vmID string, addrs ...string) error {
	return s.withDomain(vmID, func(d *domain, now time.Time) error {
		d.ipv6 = append([]string(nil), addrs...)
		return nil
	})
}

// AddVMs creates n VMs at once (seeded like the initial ones) and returns their ids.
func (s *Server) AddVMs(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flushChanges()
	now := s.now()
	ids := make([]string, 0, max(n, 0))
	for range n {
		d := s.st.newDomain(now)
		s.st.addDomain(d)
		ids = append(ids, d.id)
	}
	return ids
}

// DomainIDs lists VM ids in creation order (templates first in the initial inventory).
func (s *Server) DomainIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.st.domains))
	for i, d := range s.st.domains {
		out[i] = d.id
	}
	return out
}

// NodeIDs lists node ids in list order.
func (s *Server) NodeIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.st.nodes))
	for i, n := range s.st.nodes {
		out[i] = n.id
	}
	return out
}

// ClusterIDs lists cluster ids in list order.
func (s *Server) ClusterIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.st.clusters))
	for i, c := range s.st.clusters {
		out[i] = c.id
	}
	return out
}

// DatapoolIDs lists datapool ids in list order.
func (s *Server) DatapoolIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.st.pools))
	for i, p := range s.st.pools {
		out[i] = p.id
	}
	return out
}

// DomainInfo is what a test may want to know about a VM without going through the API.
type DomainInfo struct {
	ID, Name    string
	NodeID      string
	PowerState  int // user_power_state
	Template    bool
	Thin        bool
	ParentID    string
	Linux       bool
	AgentActive bool // qemu_state
	AgentHang   bool
	ClockOffset time.Duration
	// GuestCommands are the commands available-guest-cmds lists for the VM: older agents offer
	// the spec's 40, newer Linux agents also guest-get-diskstats and guest-get-cpustats (QEMU
	// 7.1), the newest guest-get-load too (QEMU 10.0).
	GuestCommands []string
}

// Domain describes one VM; ok is false when it does not exist.
func (s *Server) Domain(id string) (DomainInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.advance(s.now())
	d, ok := s.st.domainByID[id]
	if !ok {
		return DomainInfo{}, false
	}
	i := DomainInfo{ID: d.id, Name: d.name, PowerState: d.power, Template: d.template, Thin: d.thin,
		Linux: d.linux, AgentActive: d.agentActive(), AgentHang: d.hang, ClockOffset: d.clockOffset,
		GuestCommands: slices.Clone(d.guestCommands())}
	if d.node != nil {
		i.NodeID = d.node.id
	}
	if d.parent != nil {
		i.ParentID = d.parent.id
	}
	return i, true
}

// State is a summary of the simulated platform, also served at GET /_sim/state.
type State struct {
	Nodes        int     `json:"nodes"`
	Clusters     int     `json:"clusters"`
	Datapools    int     `json:"datapools"`
	Domains      int     `json:"domains"`
	DomainsOn    int     `json:"domains_on"`
	Templates    int     `json:"templates"`
	Tasks        int     `json:"tasks"`
	TasksRunning int     `json:"tasks_running"`
	Events       int     `json:"events"`
	EventRate    float64 `json:"event_rate"`
	Requests     int     `json:"requests"`
	InFlightMax  int     `json:"in_flight_max"`
	PushSockets  int     `json:"push_sockets"` // open sockets of /ws/
	Changes      uint64  `json:"changes"`      // the number of the last change recorded (Changes; 0 while neither the change log nor a socket wants them)
}

// Summary counts the simulated objects.
func (s *Server) Summary() State {
	s.mu.Lock()
	s.st.advance(s.now())
	st := State{Nodes: len(s.st.nodes), Clusters: len(s.st.clusters), Datapools: len(s.st.pools),
		Domains: len(s.st.domains), Tasks: len(s.st.tasks), TasksRunning: len(s.st.running),
		Events: s.st.events.len(), EventRate: s.st.eventRate, PushSockets: len(s.st.feed.sockets)}
	s.flushChanges()
	st.Changes = s.st.feed.seq
	for _, d := range s.st.domains {
		if d.power == powerOn {
			st.DomainsOn++
		}
		if d.template {
			st.Templates++
		}
	}
	s.mu.Unlock()
	s.logMu.Lock()
	st.Requests = len(s.log)
	s.logMu.Unlock()
	st.InFlightMax = s.InFlightMax()
	return st
}

// ---- control API under /_sim/ ----

type jsonDuration time.Duration

// UnmarshalJSON accepts "150ms"-style strings or numbers of nanoseconds.
func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = jsonDuration(v)
		return err
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string like \"100ms\" or nanoseconds: %w", err)
	}
	*d = jsonDuration(n)
	return nil
}

// serveControl serves the control routes of the table (routes.go); an unknown one is a 404.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	if pattern, _ := s.match(r); pattern == "" {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("Unknown control endpoint "+r.Method+" "+r.URL.Path, "")))
		return
	}
	s.table.ServeHTTP(w, r)
}

// decodeBody reads an optional JSON body into v; false (and a 400 written) when it is not JSON.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength == 0 {
		return true
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		badRequest(w, fmt.Errorf("bad JSON body: %w", err))
		return false
	}
	return true
}

func badRequest(w http.ResponseWriter, err error) {
	writeError(w, errDetail(http.StatusBadRequest, "400", txt(err.Error(), "")))
}

// okBody is the answer of a control call that has nothing else to say.
var okBody = map[string]any{"ok": true}

var controlRoutes = []route{
	{"GET /_sim/state", "counts of nodes, VMs, tasks, events", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Summary())
	}},
	{"GET /_sim/ids", "ids of nodes, clusters, datapools, VMs", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"nodes": s.NodeIDs(), "clusters": s.ClusterIDs(),
			"datapools": s.DatapoolIDs(), "domains": s.DomainIDs()})
	}},
	{"GET /_sim/requests", "the request log", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Requests())
	}},
	{"POST /_sim/requests/reset", "empty the request log", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		s.ResetRequests()
		writeJSON(w, http.StatusOK, okBody)
	}},
	{"POST /_sim/events", "add events: {n, type, same_created, message, entity_class, ahead (a duration: the controller's clock that far ahead), ahead_stays (later events are dated no earlier than these), late (a duration: dated that far back, listed where that puts them, as a transaction committed late)}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct {
			N           int          `json:"n"`
			Type        string       `json:"type"`
			SameCreated bool         `json:"same_created"`
			Message     string       `json:"message"`
			EntityClass string       `json:"entity_class"`
			Ahead       jsonDuration `json:"ahead"`
			AheadStays  bool         `json:"ahead_stays"`
			Late        jsonDuration `json:"late"`
		}
		if decodeBody(w, r, &b) {
			writeJSON(w, http.StatusOK, map[string]any{"ids": s.AddEvents(b.N, EventSpec{Type: b.Type,
				SameCreated: b.SameCreated, Message: b.Message, EntityClass: b.EntityClass, Ahead: time.Duration(b.Ahead), AheadStays: b.AheadStays, Late: time.Duration(b.Late)})})
		}
	}},
	{"POST /_sim/events/poison", "add one bad event (poison.go): {kind: huge_detail {size} | long_type {size, type} | bad_created {created} | null_created | no_created | no_id | future {offset}}; answers {id, key, type, created, size}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct {
			PoisonEvent
			Offset jsonDuration `json:"offset"`
		}
		if decodeBody(w, r, &b) {
			p := b.PoisonEvent
			p.Offset = time.Duration(b.Offset)
			info, err := s.AddPoisonEvent(p)
			if err != nil {
				badRequest(w, err)
				return
			}
			writeJSON(w, http.StatusOK, info)
		}
	}},
	{"POST /_sim/odd_fields", "odd fields of objects in every answer that holds them (list, detail, /ws/), replacing the previous ones: [{collection, id, field, value, remove}]; [] for none", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var fs []OddField
		if decodeBody(w, r, &fs) {
			if err := s.SetOddFields(fs...); err != nil {
				badRequest(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"odd_fields": len(fs)})
		}
	}},
	{"POST /_sim/events/delete_oldest", "delete the oldest events: {n}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct{ N int }
		if decodeBody(w, r, &b) {
			writeJSON(w, http.StatusOK, map[string]any{"deleted": s.DeleteOldestEvents(b.N)})
		}
	}},
	{"POST /_sim/controller_version", "what GET /api/controllers/base-version/ answers: {version}; \"none\": 404", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct {
			Version string `json:"version"`
		}
		if decodeBody(w, r, &b) {
			s.SetControllerVersion(b.Version)
			writeJSON(w, http.StatusOK, okBody)
		}
	}},
	{"POST /_sim/event_rate", "background operations per second: {per_second}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct {
			PerSecond float64 `json:"per_second"`
		}
		if decodeBody(w, r, &b) {
			s.SetEventRate(b.PerSecond)
			writeJSON(w, http.StatusOK, okBody)
		}
	}},
	{"POST /_sim/latency", "answer latency: {fixed, jitter}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct{ Fixed, Jitter jsonDuration }
		if decodeBody(w, r, &b) {
			s.SetLatency(time.Duration(b.Fixed), time.Duration(b.Jitter))
			writeJSON(w, http.StatusOK, okBody)
		}
	}},
	{"POST /_sim/fault_rate", "share of requests answered with a random fault: {rate}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct{ Rate float64 }
		if decodeBody(w, r, &b) {
			s.SetFaultRate(b.Rate)
			writeJSON(w, http.StatusOK, okBody)
		}
	}},
	{"POST /_sim/faults", "faults by path: [{path, kind, status, latency, ...}]", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var fs []struct {
			Fault
			Latency jsonDuration `json:"latency"`
		}
		if decodeBody(w, r, &fs) {
			out := make([]Fault, len(fs))
			for i, f := range fs {
				out[i] = f.Fault
				out[i].Latency = time.Duration(f.Latency)
			}
			s.SetFaults(out...)
			writeJSON(w, http.StatusOK, map[string]any{"faults": len(out)})
		}
	}},
	{"GET /_sim/changes", "the change log (Options.ChangeLog, --change-log): changes after ?since=<seq>, oldest first: [{seq, resource, event, id, time, object}]", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var since uint64
		if v := r.URL.Query().Get("since"); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				badRequest(w, fmt.Errorf("since must be a change number: %w", err))
				return
			}
			since = n
		}
		if s.opts.ChangeLog <= 0 {
			badRequest(w, errors.New("the change log is off: start the simulator with ChangeLog (veil-sim --change-log N)"))
			return
		}
		writeJSON(w, http.StatusOK, s.Changes(since))
	}},
	{"POST /_sim/ws/drop", "close every socket of the push channel /ws/ now, without a close frame: {dropped}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"dropped": s.DropPushSockets()})
	}},
	{"POST /_sim/domains/add", "add VMs: {n}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct{ N int }
		if decodeBody(w, r, &b) {
			writeJSON(w, http.StatusOK, map[string]any{"ids": s.AddVMs(b.N)})
		}
	}},
	{"POST /_sim/nodes/{id}/status", "set a node's status: {status}", false, func(s *Server, w http.ResponseWriter, r *http.Request) {
		var b struct{ Status string }
		if decodeBody(w, r, &b) {
			if err := s.SetNodeStatus(r.PathValue("id"), b.Status); err != nil {
				badRequest(w, err)
				return
			}
			writeJSON(w, http.StatusOK, okBody)
		}
	}},
	{"POST /_sim/domains/{id}/{action}", "power_off, power_on, delete, migrate {node}, agent {running}, hang {hang}, clock_offset {seconds}, command_error {command, message}, guest_hostile {command, kind: many {n} | long_strings {size} | wrong_types | raw {raw} | \"\" (normal again)}", false,
		func(s *Server, w http.ResponseWriter, r *http.Request) {
			s.controlDomain(w, r, r.PathValue("id"), r.PathValue("action"))
		}},
}

func (s *Server) controlDomain(w http.ResponseWriter, r *http.Request, id, action string) {
	var b struct {
		Node    string          `json:"node"`
		Running bool            `json:"running"`
		Hang    bool            `json:"hang"`
		Seconds float64         `json:"seconds"`
		Command string          `json:"command"`
		Message string          `json:"message"`
		Kind    string          `json:"kind"`
		N       int             `json:"n"`
		Size    int             `json:"size"`
		Raw     json.RawMessage `json:"raw"`
	}
	if !decodeBody(w, r, &b) {
		return
	}
	var err error
	switch action {
	case "power_off":
		err = s.PowerOff(id)
	case "power_on":
		err = s.PowerOn(id)
	case "delete":
		err = s.DeleteVM(id)
	case "migrate":
		err = s.MigrateVM(id, b.Node)
	case "agent":
		err = s.SetGuestAgent(id, b.Running)
	case "hang":
		err = s.SetGuestHang(id, b.Hang)
	case "clock_offset":
		err = s.SetClockOffset(id, time.Duration(b.Seconds*float64(time.Second)))
	case "command_error":
		err = s.SetGuestCommandError(id, b.Command, b.Message)
	case "guest_hostile":
		err = s.SetGuestHostile(id, GuestHostile{Command: b.Command, Kind: b.Kind, N: b.N, Size: b.Size, Raw: b.Raw})
	default:
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("Unknown domain action "+action, "")))
		return
	}
	if err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, http.StatusOK, okBody)
}
