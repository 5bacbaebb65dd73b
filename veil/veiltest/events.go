package veiltest

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// event is one journal entry; its JSON is encoded once per language, so a page is a
// concatenation.
type event struct {
	id      string
	typ     string
	user    string
	created time.Time
	task    string
	msg     text
	detail  text
	ents    []eventEntity
	enc     [langCount][]byte
	// future marks an event dated ahead of the clock (a poison event, poison.go): events
	// written after it with an earlier created go before it, as ordering by created puts them.
	future bool
	// late marks an event that appears after newer ones (EventSpec.Late): it goes where its
	// created puts it.
	late bool
	// bad changes the event's wire form (a poison event that does not decode: no id, a bad or
	// missing created); nil for every normal event.
	bad *badWire
}

// bytes is the event's JSON in language l, encoded on first use.
func (e *event) bytes(l lang) []byte {
	if e.enc[l] == nil {
		w := eventJSON{ID: e.id, Message: e.msg.in(l), DetailMessage: e.detail.in(l), User: e.user, Type: e.typ,
			Created: ts(e.created), Readed: []string{}, Entities: e.ents}
		if w.Entities == nil {
			w.Entities = []eventEntity{}
		}
		if e.task != "" {
			w.Task = &e.task
		}
		e.enc[l], _ = json.Marshal(w)
		if e.bad != nil {
			e.enc[l] = e.bad.apply(e.enc[l])
		}
	}
	return e.enc[l]
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

// insert puts e at index i (oldest first; i == len appends).
func (j *journal) insert(i int, e *event) {
	if i >= j.len() {
		j.evs = append(j.evs, e)
	} else {
		j.evs = slices.Insert(j.evs, j.head+i, e)
	}
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

// newEvent appends e (its type, user, texts, task and entities), created at created and given an
// id; created never goes backwards so the journal stays ordered. Only an event dated in the
// future (poison.go) may be later than a new one: the new one then goes before it (and every
// other future one later than it), where ordering by created puts it.
func (st *state) newEvent(created time.Time, e event) *event {
	j := &st.events
	at := j.len()
	for at > 0 && (j.at(at-1).future || e.late) && j.at(at-1).created.After(created) {
		at--
	}
	if at > 0 && created.Before(j.at(at-1).created) {
		created = j.at(at - 1).created
	}
	created = created.Truncate(time.Microsecond)
	e.id, e.created = st.uuid(), created
	j.insert(at, &e)
	return &e
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
	msg := txt(spec.Message, "")
	user := "system"
	templates := eventMessages[typ]
	if len(templates) == 0 { // a type of the caller's own: a message that fits any
		templates = []text{txt("%s: "+typ+" event", "%s: событие "+typ)}
	}
	pick := func(subject text) text {
		tm := templates[st.rng.IntN(len(templates))]
		return text{fmt.Sprintf(tm.en, subject.en), fmt.Sprintf(tm.ru, subject.ru)}
	}
	switch {
	case class == "" && len(st.domains) > 0 || class == "domain" && len(st.domains) > 0:
		d := st.domains[st.rng.IntN(len(st.domains))]
		ents = []eventEntity{{d.id, "domain"}}
		if msg.en == "" {
			msg = pick(txtf("Virtual machine %s", "Виртуальная машина %s", d.name))
		}
	case (class == "" || class == "node") && len(st.nodes) > 0:
		n := st.nodes[st.rng.IntN(len(st.nodes))]
		ents = []eventEntity{{n.id, "node"}}
		if msg.en == "" {
			msg = pick(txtf("Node %s", "Узел %s", n.name))
		}
	case class != "" && class != "none":
		ents = []eventEntity{{st.uuid(), class}}
	}
	if msg.en == "" {
		msg = txt("Controller heartbeat", "Контроллер на связи")
	}
	if st.rng.IntN(4) == 0 {
		user = "admin"
	}
	return st.newEvent(created, event{typ: typ, user: user, msg: msg, ents: ents, late: spec.Late > 0})
}

var eventMessages = map[string][]text{
	"info": {
		txt("%s: configuration changed", "%s: конфигурация изменена"),
		txt("%s: backup finished", "%s: резервное копирование завершено"),
		txt("%s: snapshot created", "%s: снимок создан"),
		txt("%s: guest agent connected", "%s: гостевой агент подключён"),
	},
	"warning": {
		txt("%s: high memory usage", "%s: высокое потребление памяти"),
		txt("%s: guest agent is not responding", "%s: гостевой агент не отвечает"),
		txt("%s: disk usage above 85%%", "%s: диск заполнен более чем на 85%%"),
	},
	"error": {
		txt("%s: failed to start", "%s: не удалось запустить"),
		txt("%s: storage I/O error", "%s: ошибка ввода-вывода хранилища"),
		txt("%s: lost connection", "%s: потеряна связь"),
	},
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

// EventSpec describes events added by AddEvents. Empty fields are chosen at random.
type EventSpec struct {
	Type        string // info, warning, error
	SameCreated bool   // all n events share one created instant
	Message     string
	EntityClass string // domain, node, or any class name; "none" for no entity
	// Ahead dates the events that far after the simulator's clock, as a controller whose clock
	// runs ahead does (they are listed where that created puts them).
	Ahead time.Duration
	// AheadStays keeps the journal's order as a controller with a monotonic clock does: the
	// events written after ones dated Ahead are dated as the newest of them (not before them).
	AheadStays bool
	// Late dates the events that far before the simulator's clock and lists them where that
	// created puts them, after newer events were listed: a transaction that committed late, a
	// clock stepped back.
	Late time.Duration
}

// AddEvents appends n events and returns their ids, oldest first.
func (s *Server) AddEvents(n int, opt EventSpec) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	ids := make([]string, 0, max(n, 0))
	for i := 0; i < n; i++ {
		t := now.Add(opt.Ahead - opt.Late)
		if !opt.SameCreated {
			t = t.Add(time.Duration(i) * time.Microsecond)
		}
		e := s.st.randomEvent(t, opt)
		// Dated ahead: the events written after it with the clock right go before it.
		e.future = opt.Ahead > 0 && !opt.AheadStays
		ids = append(ids, e.id)
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

// SetEventRate changes the rate of the background activity, in journal events per second:
// simulated operations with their tasks and events, see activity.go. 0 stops it at once: its
// running tasks end now and a lost guest agent comes back, so the journal then holds still.
func (s *Server) SetEventRate(perSecond float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	s.st.eventRate = perSecond
	if perSecond > 0 {
		s.st.scheduleActivity(now, 1)
		return
	}
	s.st.stopActivity(now)
}
