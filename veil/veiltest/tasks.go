package veiltest

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"
)

// task is one entry of the task journal. While it runs its progress follows the clock;
// when its deadline passes, apply changes the platform state (an error makes it FAILED).
//
// Its name is a sentence naming the entities, as the platform writes it ("Starting the virtual
// machine win_test."); its journal events (created, then finished or failed) point at it.
type task struct {
	id                string
	name              text
	parent            string // the multitask this task is part of; "" for none
	multitask         bool
	background        bool // started by the background activity (activity.go)
	status            string
	created, deadline time.Time
	finished          time.Time
	user              string
	entities          taskEntities
	errMsg            text
	apply             func(now time.Time) error
	entity            func(now time.Time) any // nil: data_without_entity
	response          func(now time.Time) any // GET /api/tasks/<id>/response/; nil: the entity
	events            []*event
	done              chan struct{}
	final             [langCount][]byte // cached list encoding once final
	progressStep      int               // the last step of progress recorded as a change
}

func (t *task) isFinal() bool { return t.status != "IN_PROGRESS" }

type taskJSON struct {
	ID            string         `json:"id"`
	VerboseName   string         `json:"verbose_name"`
	Name          string         `json:"name"`
	Progress      int            `json:"progress"`
	Status        string         `json:"status"`
	Created       string         `json:"created"`
	FinishedTime  *string        `json:"finished_time"`
	Executed      any            `json:"executed"`
	ErrorMessage  string         `json:"error_message"`
	IsCancellable bool           `json:"is_cancellable"`
	IsMultitask   bool           `json:"is_multitask"`
	Parent        *string        `json:"parent"`
	User          map[string]any `json:"user"`
	Entities      taskEntities   `json:"entities"`
}

// taskDetailJSON is the detail of a task: the list fields plus its journal events.
type taskDetailJSON struct {
	taskJSON
	Events             []json.RawMessage `json:"events"`
	NodesUserResponses []any             `json:"nodes_user_responses"`
}

var taskVerboseName = txt("Task", "Задача")

func (t *task) wire(now time.Time, l lang) taskJSON {
	j := taskJSON{ID: t.id, VerboseName: taskVerboseName.in(l), Name: t.name.in(l), Status: t.status,
		Created: ts(t.created), Executed: 0, ErrorMessage: t.errMsg.in(l), IsMultitask: t.multitask,
		User: map[string]any{"id": userID(t.user), "username": t.user}, Entities: t.entities}
	if t.parent != "" {
		j.Parent = &t.parent
	}
	if t.isFinal() {
		j.Progress = 100
		f := ts(t.finished)
		j.FinishedTime = &f
		// The real platform sends executed as a number while running and a string when done.
		j.Executed = strconv.FormatFloat(t.finished.Sub(t.created).Seconds(), 'f', 6, 64)
		return j
	}
	j.IsCancellable = true
	j.Progress = t.progress(now)
	return j
}

// progress is a running task's progress in percent at now: it follows the clock, 99 at most.
func (t *task) progress(now time.Time) int {
	var p int
	if dur := t.deadline.Sub(t.created); dur > 0 {
		p = min(99, int(100*now.Sub(t.created)/dur))
	}
	return max(p, 0)
}

// progressStep: a running task's progress is a change (pushed, logged) each time it passes a
// multiple of progressStep percent, not at every percent, which would flood the push channel.
const progressStep = 25

// noteProgress records the running tasks whose progress passed a step since they last did.
func (st *state) noteProgress(now time.Time) {
	if !st.feed.wants("/tasks/") {
		return
	}
	for _, t := range st.running {
		if step := t.progress(now) / progressStep; step > t.progressStep {
			t.progressStep = step
			st.changed(ChangeUpdated, t)
		}
	}
}

func userID(name string) int {
	switch name {
	case "admin":
		return 1
	case "viewer":
		return 2
	case "system":
		return 3
	}
	return 0
}

// taskBytes is the list form of a task.
func (st *state) taskBytes(t *task, now time.Time, l lang) []byte {
	if t.final[l] != nil {
		return t.final[l]
	}
	b, _ := json.Marshal(t.wire(now, l))
	if t.isFinal() {
		t.final[l] = b
	}
	return b
}

// taskDetail is the detail form of a task: with its journal events, those the journal still
// keeps (Options.EventsRetention deletes the oldest).
func (st *state) taskDetail(t *task, now time.Time, l lang) taskDetailJSON {
	j := taskDetailJSON{taskJSON: t.wire(now, l), Events: make([]json.RawMessage, 0, len(t.events)), NodesUserResponses: []any{}}
	kept := t.events[:0]
	for _, e := range t.events {
		if st.events.byID[e.id] == e {
			kept = append(kept, e)
			j.Events = append(j.Events, e.bytes(l))
		}
	}
	clear(t.events[len(kept):])
	t.events = kept
	return j
}

// envelope is data_with_entity or data_without_entity.
func (st *state) envelope(t *task, now time.Time, l lang) map[string]any {
	env := map[string]any{"_task": st.taskDetail(t, now, l)}
	if t.entity == nil {
		return env
	}
	e := t.entity(now)
	if e == nil {
		return env
	}
	if st.opts.Profile != ProfileAlternative {
		env["_entity"] = e
		return env
	}
	// The alternative profile: "entity", the uuid (vendor code reads it so).
	b, _ := json.Marshal(e)
	var one struct {
		ID string `json:"id"`
	}
	var many []struct {
		ID string `json:"id"`
	}
	switch {
	case json.Unmarshal(b, &one) == nil && one.ID != "":
		env["entity"] = one.ID
	case json.Unmarshal(b, &many) == nil && len(many) > 0:
		env["entity"] = many[0].ID
	}
	return env
}

// result is what an operation answers without ?async=1 and at /api/tasks/<id>/response/: the
// resource it worked on (the VM for start, shutdown, template), what it created (clone), or,
// for operations without one (remove, backup), the final task.
func (st *state) result(t *task, now time.Time, l lang) any {
	switch {
	case t.response != nil:
		return t.response(now)
	case t.entity != nil:
		if e := t.entity(now); e != nil {
			return e
		}
	}
	return st.taskDetail(t, now, l)
}

type taskSpec struct {
	name     text
	key      string // idempotency key, becomes the task id
	user     string
	parent   string
	entities taskEntities
	duration time.Duration // 0: Options.TaskDuration
	apply    func(now time.Time) error
	entity   func(now time.Time) any
	response func(now time.Time) any
}

func (st *state) startTask(now time.Time, sp taskSpec) *task {
	id := sp.key
	if id == "" {
		id = st.uuid()
	}
	dur := sp.duration
	if dur <= 0 {
		dur = st.opts.TaskDuration
	}
	t := &task{id: id, name: sp.name, status: "IN_PROGRESS", created: now, parent: sp.parent,
		deadline: now.Add(dur), user: sp.user, entities: sp.entities,
		apply: sp.apply, entity: sp.entity, response: sp.response, done: make(chan struct{})}
	st.tasks = append(st.tasks, t)
	st.taskByID[t.id] = t
	st.running = append(st.running, t)
	st.markBusy(t, 1)
	st.changed(ChangeCreated, t)
	t.events = append(t.events, st.newEvent(now, event{typ: "info", user: t.user,
		msg: taskMessage(txt("Task created:  ", "Задача создана:  "), t.name), task: t.id, ents: t.eventEntities()}))
	return t
}

// taskMessage is the message of a task's journal event: "Task created:  <task name>" (two
// spaces, as the platform writes it).
func taskMessage(prefix, name text) text {
	return text{prefix.en + name.en, prefix.in(langRU) + name.in(langRU)}
}

// markBusy counts the running tasks of each domain, so the background activity leaves a VM
// alone while an operation works on it.
func (st *state) markBusy(t *task, delta int) {
	for _, e := range t.entities {
		if e.EntityClass != "domain" {
			continue
		}
		if d, ok := st.domainByID[e.EntityUUID]; ok {
			d.busy += delta
		}
	}
}

func (t *task) eventEntities() []eventEntity {
	out := slices.Clone(t.entities)
	slices.SortFunc(out, func(a, b eventEntity) int {
		switch {
		case a.EntityUUID < b.EntityUUID:
			return -1
		case a.EntityUUID > b.EntityUUID:
			return 1
		}
		return 0
	})
	return out
}

// advance brings the simulation up to now: due tasks finish and background operations start in
// the order of their instants, so the journal tells one story in time order.
func (st *state) advance(now time.Time) {
	if st.eventRate <= 0 {
		st.nextGen = time.Time{}
	}
	for {
		due := -1
		for i, t := range st.running {
			if !t.deadline.After(now) && (due < 0 || t.deadline.Before(st.running[due].deadline)) {
				due = i
			}
		}
		bg := st.eventRate > 0 && !st.nextGen.After(now)
		switch {
		case due >= 0 && (!bg || !st.running[due].deadline.After(st.nextGen)):
			t := st.running[due]
			st.running = slices.Delete(st.running, due, due+1)
			st.finish(t, t.deadline)
		case bg:
			at := st.nextGen
			n := st.activity(at)
			st.scheduleActivity(at, float64(max(n, 1)))
		default:
			st.noteProgress(now)
			return
		}
	}
}

// scheduleActivity sets the next background operation after one that writes n events, so the
// journal grows at Options.EventRate events per second.
func (st *state) scheduleActivity(from time.Time, n float64) {
	st.nextGen = from.Add(time.Duration(n / st.eventRate * float64(time.Second)))
}

func (st *state) finish(t *task, at time.Time) {
	var err error
	if st.opts.TaskFailureRate > 0 && st.rng.Float64() < st.opts.TaskFailureRate {
		err = textError(txt("Simulated failure.", "Имитированный сбой."))
	} else if t.apply != nil {
		err = t.apply(at)
	}
	st.markBusy(t, -1)
	t.finished = at
	if err != nil {
		var te textError
		var pe partialError
		t.status = "FAILED"
		switch {
		case errors.As(err, &te):
			t.errMsg = text(te)
		case errors.As(err, &pe):
			t.errMsg, t.status = text(pe), "PARTIAL"
		default:
			t.errMsg = txt(err.Error(), "")
		}
		t.events = append(t.events, st.newEvent(at, event{typ: "error", user: t.user,
			msg: taskMessage(txt("Task failed:  ", "Задача завершилась с ошибкой:  "), t.name), detail: t.errMsg, task: t.id, ents: t.eventEntities()}))
	} else {
		t.status = "SUCCESS"
		t.events = append(t.events, st.newEvent(at, event{typ: "info", user: t.user,
			msg: taskMessage(txt("Task finished successfully:  ", "Задача успешно завершена:  "), t.name), task: t.id, ents: t.eventEntities()}))
	}
	st.changed(ChangeUpdated, t)
	close(t.done)
}

// taskEntities are a task's entities in the order the task was built, the entity it creates
// first. They encode as the platform's {uuid: class} object in that order: a Go map would sort
// the keys, and the vendor's Python client takes the first key as the created entity
// (VeilTask.first_entity).
type taskEntities []eventEntity

func (es taskEntities) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		id, err := json.Marshal(e.EntityUUID)
		if err != nil {
			return nil, err
		}
		class, err := json.Marshal(e.EntityClass)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, id...), ':'), class...)
	}
	return append(b, '}'), nil
}
