package veiltest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// task is one entry of the task journal. While it runs its progress follows the clock;
// when its deadline passes, apply changes the platform state (an error makes it FAILED).
type task struct {
	id, name, verbose string
	status            string
	created, deadline time.Time
	finished          time.Time
	user              string
	entities          map[string]string
	errMsg            string
	apply             func(now time.Time) error
	entity            func(now time.Time) any // nil: data_without_entity
	done              chan struct{}
	final             []byte // cached encoding once final
}

func (t *task) isFinal() bool { return t.status != "IN_PROGRESS" }

type taskJSON struct {
	ID            string            `json:"id"`
	VerboseName   string            `json:"verbose_name"`
	Name          string            `json:"name"`
	Progress      int               `json:"progress"`
	Status        string            `json:"status"`
	Created       string            `json:"created"`
	FinishedTime  *string           `json:"finished_time"`
	Executed      any               `json:"executed"`
	ErrorMessage  string            `json:"error_message"`
	IsCancellable bool              `json:"is_cancellable"`
	User          map[string]any    `json:"user"`
	Entities      map[string]string `json:"entities"`
}

func (t *task) wire(now time.Time, dur time.Duration) taskJSON {
	j := taskJSON{ID: t.id, VerboseName: t.verbose, Name: t.name, Status: t.status,
		Created: ts(t.created), Executed: 0, ErrorMessage: t.errMsg,
		User: map[string]any{"id": userID(t.user), "username": t.user}, Entities: t.entities}
	if t.isFinal() {
		j.Progress = 100
		f := ts(t.finished)
		j.FinishedTime = &f
		// The real platform sends executed as a number while running and a string when done.
		j.Executed = strconv.FormatFloat(t.finished.Sub(t.created).Seconds(), 'f', 6, 64)
		return j
	}
	j.IsCancellable = true
	if dur > 0 {
		j.Progress = min(99, int(100*now.Sub(t.created)/dur))
	}
	j.Progress = max(j.Progress, 0)
	return j
}

func userID(name string) int {
	switch name {
	case "admin":
		return 1
	case "viewer":
		return 2
	}
	return 0
}

func (st *state) taskBytes(t *task, now time.Time) []byte {
	if t.final != nil {
		return t.final
	}
	b, _ := json.Marshal(t.wire(now, st.opts.TaskDuration))
	if t.isFinal() {
		t.final = b
	}
	return b
}

// envelope is data_with_entity or data_without_entity.
func (st *state) envelope(t *task, now time.Time) map[string]any {
	env := map[string]any{"_task": json.RawMessage(st.taskBytes(t, now))}
	if t.entity != nil {
		if e := t.entity(now); e != nil {
			env["_entity"] = e
		}
	}
	return env
}

type taskSpec struct {
	name, verbose string
	key           string // idempotency key, becomes the task id
	user          string
	entities      map[string]string
	apply         func(now time.Time) error
	entity        func(now time.Time) any
}

func (st *state) startTask(now time.Time, sp taskSpec) *task {
	id := sp.key
	if id == "" {
		id = st.uuid()
	}
	t := &task{id: id, name: sp.name, verbose: sp.verbose, status: "IN_PROGRESS", created: now,
		deadline: now.Add(st.opts.TaskDuration), user: sp.user, entities: sp.entities,
		apply: sp.apply, entity: sp.entity, done: make(chan struct{})}
	if t.entities == nil {
		t.entities = map[string]string{}
	}
	st.tasks = append(st.tasks, t)
	st.taskByID[t.id] = t
	st.running = append(st.running, t)
	st.newEvent(now, "info", t.user, fmt.Sprintf("Task '%s' started", t.verbose), "", t.id, t.eventEntities()...)
	return t
}

func (t *task) eventEntities() []eventEntity {
	var out []eventEntity
	for id, class := range t.entities {
		out = append(out, eventEntity{id, class})
	}
	return out
}

// advance brings the simulation up to now: background events, then due tasks.
func (st *state) advance(now time.Time) {
	st.generate(now)
	if len(st.running) == 0 {
		return
	}
	keep := st.running[:0]
	for _, t := range st.running {
		if now.Before(t.deadline) {
			keep = append(keep, t)
			continue
		}
		st.finish(t, t.deadline)
	}
	clear(st.running[len(keep):])
	st.running = keep
}

func (st *state) finish(t *task, at time.Time) {
	var err error
	if st.opts.TaskFailureRate > 0 && st.rng.Float64() < st.opts.TaskFailureRate {
		err = fmt.Errorf("simulated failure")
	} else if t.apply != nil {
		err = t.apply(at)
	}
	t.finished = at
	if err != nil {
		t.status, t.errMsg = "FAILED", err.Error()
		st.newEvent(at, "error", t.user, fmt.Sprintf("Task '%s' failed", t.verbose), err.Error(), t.id, t.eventEntities()...)
	} else {
		t.status = "SUCCESS"
		st.newEvent(at, "info", t.user, fmt.Sprintf("Task '%s' finished successfully", t.verbose), "", t.id, t.eventEntities()...)
	}
	close(t.done)
}

// seedTasks writes finished tasks in the past so the journal is not empty at start.
func (st *state) seedTasks(now time.Time) {
	kinds := []struct{ name, verb string }{
		{"domain_start", "Start"}, {"domain_shutdown", "Shutdown"}, {"domain_backup", "Backup"},
		{"domain_clone", "Clone"}, {"domain_ssh_inject", "SSH key injection into"},
	}
	t := now.Add(-2 * time.Hour)
	for range st.opts.InitialTasks {
		k := kinds[st.rng.IntN(len(kinds))]
		ents := map[string]string{}
		target := "virtual machine"
		if len(st.domains) > 0 {
			d := st.domains[st.rng.IntN(len(st.domains))]
			ents[d.id] = "domain"
			target = "virtual machine " + d.name
		}
		dur := time.Duration(1+st.rng.IntN(30000)) * time.Millisecond
		tk := &task{id: st.uuid(), name: k.name, verbose: k.verb + " " + target, status: "SUCCESS",
			created: t, finished: t.Add(dur), deadline: t.Add(dur), user: "admin", entities: ents, done: make(chan struct{})}
		if st.rng.IntN(10) == 0 {
			tk.status, tk.errMsg = "FAILED", "Operation timed out"
		}
		close(tk.done)
		st.tasks = append(st.tasks, tk)
		st.taskByID[tk.id] = tk
		t = t.Add(time.Duration(1+st.rng.IntN(300)) * time.Second)
	}
}
