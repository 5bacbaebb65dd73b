package veiltest

import (
	"encoding/json"
	"fmt"
	"time"
)

// event is one journal entry; its JSON is encoded once, so a page is a concatenation.
type event struct {
	id      string
	typ     string
	user    string
	created time.Time
	json    []byte
}

// journal keeps events oldest first; deleted events are dropped from the head without
// copying until the dead prefix is large.
type journal struct {
	evs       []*event
	head      int
	byID      map[string]*event
	retention int
}

func (j *journal) init(retention int) {
	j.byID = map[string]*event{}
	j.retention = retention
}

func (j *journal) len() int { return len(j.evs) - j.head }

// at returns the i-th event, oldest first.
func (j *journal) at(i int) *event { return j.evs[j.head+i] }

func (j *journal) last() *event {
	if j.len() == 0 {
		return nil
	}
	return j.evs[len(j.evs)-1]
}

func (j *journal) add(e *event) {
	j.evs = append(j.evs, e)
	j.byID[e.id] = e
	if j.retention > 0 && j.len() > j.retention {
		j.deleteOldest(j.len() - j.retention)
	}
}

func (j *journal) deleteOldest(n int) int {
	n = min(max(n, 0), j.len())
	for i := range n {
		e := j.evs[j.head+i]
		delete(j.byID, e.id)
		j.evs[j.head+i] = nil
	}
	j.head += n
	if j.head > 1024 && j.head > len(j.evs)/2 {
		j.evs = append([]*event(nil), j.evs[j.head:]...)
		j.head = 0
	}
	return n
}

type eventJSON struct {
	ID            string        `json:"id"`
	Message       string        `json:"message"`
	DetailMessage string        `json:"detail_message"`
	User          string        `json:"user"`
	Type          string        `json:"type"`
	Created       string        `json:"created"`
	Task          *string       `json:"task"`
	Readed        []string      `json:"readed"`
	Entities      []eventEntity `json:"entities"`
}

type eventEntity struct {
	EntityUUID  string `json:"entity_uuid"`
	EntityClass string `json:"entity_class"`
}

// newEvent appends an event; created never goes backwards so the journal stays ordered.
func (st *state) newEvent(created time.Time, typ, user, msg, detail, taskID string, ents ...eventEntity) *event {
	if l := st.events.last(); l != nil && created.Before(l.created) {
		created = l.created
	}
	created = created.Truncate(time.Microsecond)
	e := &event{id: st.uuid(), typ: typ, user: user, created: created}
	w := eventJSON{ID: e.id, Message: msg, DetailMessage: detail, User: user, Type: typ,
		Created: ts(created), Readed: []string{}, Entities: ents}
	if w.Entities == nil {
		w.Entities = []eventEntity{}
	}
	if taskID != "" {
		w.Task = &taskID
	}
	e.json, _ = json.Marshal(w)
	st.events.add(e)
	return e
}

// randomEvent writes a plausible platform event about a random VM or node.
func (st *state) randomEvent(created time.Time, spec EventSpec) *event {
	typ := spec.Type
	if typ == "" {
		switch r := st.rng.IntN(100); {
		case r < 80:
			typ = "info"
		case r < 95:
			typ = "warning"
		default:
			typ = "error"
		}
	}
	class := spec.EntityClass
	var ents []eventEntity
	msg := spec.Message
	user := "system"
	templates := eventMessages[typ]
	if len(templates) == 0 { // a type of the caller's own: a message that fits any
		templates = []string{"%s: " + typ + " event"}
	}
	switch {
	case class == "" && len(st.domains) > 0 || class == "domain" && len(st.domains) > 0:
		d := st.domains[st.rng.IntN(len(st.domains))]
		ents = []eventEntity{{d.id, "domain"}}
		if msg == "" {
			msg = fmt.Sprintf(templates[st.rng.IntN(len(templates))], "Virtual machine "+d.name)
		}
	case (class == "" || class == "node") && len(st.nodes) > 0:
		n := st.nodes[st.rng.IntN(len(st.nodes))]
		ents = []eventEntity{{n.id, "node"}}
		if msg == "" {
			msg = fmt.Sprintf(templates[st.rng.IntN(len(templates))], "Node "+n.name)
		}
	case class != "" && class != "none":
		ents = []eventEntity{{st.uuid(), class}}
	}
	if msg == "" {
		msg = "Controller heartbeat"
	}
	if st.rng.IntN(4) == 0 {
		user = "admin"
	}
	return st.newEvent(created, typ, user, msg, "", "", ents...)
}

var eventMessages = map[string][]string{
	"info":    {"%s: configuration changed", "%s: backup finished", "%s: snapshot created", "%s: guest agent connected"},
	"warning": {"%s: high memory usage", "%s: guest agent is not responding", "%s: disk usage above 85%%"},
	"error":   {"%s: failed to start", "%s: storage I/O error", "%s: lost connection"},
}

// seedEvents fills the journal with InitialEvents events spread over the last hours.
func (st *state) seedEvents(now time.Time) {
	n := st.opts.InitialEvents
	if n <= 0 {
		return
	}
	step := time.Duration(int64(6*time.Hour) / int64(n))
	start := now.Add(-6 * time.Hour)
	for i := 0; i < n; {
		t := start.Add(time.Duration(i)*step + time.Duration(st.rng.Int64N(int64(step)/2+1)))
		burst := 1
		if st.rng.IntN(20) == 0 {
			burst = 2 + st.rng.IntN(3) // several events sharing one instant
		}
		for b := 0; b < burst && i < n; b++ {
			st.randomEvent(t, EventSpec{})
			i++
		}
	}
}

// generate writes background events owed at EventRate since the last call.
func (st *state) generate(now time.Time) {
	if st.eventRate <= 0 {
		st.lastGen = now
		st.eventDebt = 0
		return
	}
	if el := now.Sub(st.lastGen); el > 0 {
		st.eventDebt += st.eventRate * el.Seconds()
	}
	st.lastGen = now
	for st.eventDebt >= 1 {
		burst := 1
		if st.rng.IntN(10) == 0 {
			burst = min(2+st.rng.IntN(3), int(st.eventDebt))
		}
		for range burst {
			st.randomEvent(now, EventSpec{})
		}
		st.eventDebt -= float64(burst)
	}
}

// EventSpec describes events added by AddEvents. Empty fields are chosen at random.
type EventSpec struct {
	Type        string // info, warning, error
	SameCreated bool   // all n events share one created instant
	Message     string
	EntityClass string // domain, node, or any class name; "none" for no entity
}

// AddEvents appends n events and returns their ids, oldest first.
func (s *Server) AddEvents(n int, opt EventSpec) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	ids := make([]string, 0, max(n, 0))
	for i := 0; i < n; i++ {
		t := now
		if !opt.SameCreated {
			t = now.Add(time.Duration(i) * time.Microsecond)
		}
		ids = append(ids, s.st.randomEvent(t, opt).id)
	}
	return ids
}

// DeleteOldestEvents removes up to n of the oldest events and returns how many it removed.
func (s *Server) DeleteOldestEvents(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.events.deleteOldest(n)
}

// EventCount is the number of events in the journal.
func (s *Server) EventCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.events.len()
}

// SetEventRate changes the background event rate (events per second; 0 stops it).
func (s *Server) SetEventRate(perSecond float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.generate(s.now())
	s.st.eventRate = perSecond
}
