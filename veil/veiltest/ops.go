package veiltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type userKey struct{}

func withUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

func userFrom(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	if u == "" {
		return "admin"
	}
	return u
}

// opFunc validates a request and starts its task, under Server.mu. A nil task with a nil
// error means the function answered already (a repeated idempotency_key).
type opFunc func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError)

func (s *Server) operate(w http.ResponseWriter, r *http.Request, fn opFunc) {
	s.operateRepeat(w, r, nil, fn)
}

// operateRepeat is operate with a custom answer for a repeated idempotency_key.
func (s *Server) operateRepeat(w http.ResponseWriter, r *http.Request, repeat func(time.Time) (any, bool), fn opFunc) {
	body, e := readBody(r)
	if e != nil {
		writeError(w, e)
		return
	}
	key, e := idempotencyKey(body)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	now := s.now()
	s.st.advance(now)
	if key != "" {
		if t, ok := s.st.taskByID[key]; ok {
			// An idempotency key already seen never runs again; it reports the existing operation.
			var env any = s.st.envelope(t, now, reqLang(r))
			if repeat != nil {
				if v, ok := repeat(now); ok {
					env = v
				}
			}
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, env)
			return
		}
	}
	t, e := fn(w, now, body, key, userFrom(r.Context()))
	if t != nil {
		// The background activity leaves alone what a client works on.
		for _, e := range t.entities {
			if d, ok := s.st.domainByID[e.EntityUUID]; ok {
				d.pinned = true
			}
		}
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	if t != nil {
		s.respondTask(w, r, t)
	}
}

func (st *state) domainEntity(d *domain) func(time.Time) any {
	return func(now time.Time) any { return d.detail(now) }
}

// domainEnts are a task's domains in the order given: what the task creates first.
func domainEnts(ds ...*domain) taskEntities {
	es := make(taskEntities, len(ds))
	for i, d := range ds {
		es[i] = eventEntity{d.id, "domain"}
	}
	return es
}

func (st *state) lookupDomain(id string) (*domain, *apiError) {
	d, ok := st.domainByID[id]
	if !ok {
		return nil, errNotFound(txt("Virtual machine is not found.", "Виртуальная машина не найдена."))
	}
	return d, nil
}

func (s *Server) ballooning(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		n, ok := s.st.nodeByID[id]
		if !ok {
			return nil, errNotFound(txt("Node is not found.", "Узел не найден."))
		}
		on, e := boolField(body, "ballooning", true)
		if e != nil {
			return nil, e
		}
		return s.st.startTask(now, taskSpec{
			name: nameBallooning(n), key: key, user: user,
			entities: taskEntities{{n.id, "node"}},
			apply: func(time.Time) error {
				n.ballooning = on // not in the list form, but a change of the node all the same
				s.st.changed(ChangeUpdated, n)
				return nil
			},
			entity: func(now time.Time) any { return n.detail(now) },
		}), nil
	})
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, id string) {
	// As the platform: a repeated start answers with the virtual machine object.
	repeat := func(now time.Time) (any, bool) {
		d, ok := s.st.domainByID[id]
		if !ok {
			return nil, false
		}
		return d.detail(now), true
	}
	s.operateRepeat(w, r, repeat, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		d, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		if _, e := boolField(body, "force", false); e != nil {
			return nil, e
		}
		if d.template {
			return nil, errRule(txtf("Virtual machine %s is a template and cannot be started.", "Виртуальная машина %s является шаблоном и не может быть запущена.", d.name))
		}
		return s.st.startTask(now, taskSpec{
			name: nameStart(d), key: key, user: user,
			entities: domainEnts(d),
			apply: func(at time.Time) error {
				if err := s.st.gone(d); err != nil {
					return err
				}
				s.st.setPower(d, powerOn, at)
				return nil
			},
			entity: s.st.domainEntity(d),
		}), nil
	})
}

func (s *Server) shutdown(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		d, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		force, e := boolField(body, "force", false)
		if e != nil {
			return nil, e
		}
		return s.st.startTask(now, taskSpec{
			name: nameShutdown(d, force), key: key, user: user,
			entities: domainEnts(d),
			apply: func(at time.Time) error {
				if err := s.st.gone(d); err != nil {
					return err
				}
				s.st.setPower(d, powerOff, at)
				return nil
			},
			entity: s.st.domainEntity(d),
		}), nil
	})
}

// clone makes count VMs from a template (thin clones) or a VM. As the vendor's Python client
// does, the client may choose their ids (domains_ids); names come from verbose_name, numbered
// "-1", "-2"... when count > 1. One VM is one task; several are a multitask with a task per VM
// (their parent), PARTIAL when only some succeed. The task's response is the new VM, or the
// list of them.
func (s *Server) clone(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		src, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		name, e := stringField(body, "verbose_name", true)
		if e != nil {
			return nil, e
		}
		ids, count, e := s.st.cloneIDs(body)
		if e != nil {
			return nil, e
		}
		names, e := s.st.cloneNames(name, count)
		if e != nil {
			return nil, e
		}
		n, pool, e := s.st.clonePlace(body, src)
		if e != nil {
			return nil, e
		}
		clones := make([]*domain, count)
		for i := range clones {
			cid := ""
			if len(ids) > 0 {
				cid = ids[i]
			}
			clones[i] = s.st.cloneOf(src, cloneSpec{cid, names[i], n, pool}, now)
		}
		if count == 1 {
			c := clones[0]
			return s.st.startTask(now, taskSpec{
				name: nameClone(c, src), key: key, user: user,
				entities: domainEnts(c, src),
				apply:    s.st.cloneDone(c),
				entity:   s.st.domainEntity(c),
			}), nil
		}
		return s.st.startMultiClone(now, src, clones, key, user), nil
	})
}

// cloneIDs reads domains_ids (ids the client chose, unused so far) and count from a clone's
// body; count is len(ids) when only the ids are given.
func (st *state) cloneIDs(body map[string]any) ([]string, int, *apiError) {
	var ids []string
	if v, ok := body["domains_ids"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, 0, errField("domains_ids", "invalid", txt("Expected a list of UUIDs.", "Ожидается список UUID."))
		}
		seen := map[string]bool{}
		for _, x := range list {
			id, ok := x.(string)
			if !ok || !isUUID(id) {
				return nil, 0, errField("domains_ids", "invalid", txt("Must be a list of valid UUIDs.", "Должен быть списком корректных UUID."))
			}
			id = strings.ToLower(id)
			if seen[id] || st.domainByID[id] != nil {
				return nil, 0, errField("domains_ids", "unique", txtf("Virtual machine id %s is already used.", "Идентификатор виртуальной машины %s уже используется.", id))
			}
			seen[id] = true
			ids = append(ids, id)
		}
	}
	count := max(len(ids), 1)
	if v, ok := body["count"]; ok && v != nil {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil || n < 1 || n > 1000 {
			return nil, 0, errField("count", "invalid", txt("Must be an integer from 1 to 1000.", "Должно быть целым числом от 1 до 1000."))
		}
		if len(ids) > 0 && n != len(ids) {
			return nil, 0, errField("domains_ids", "invalid", txtf("Expected %d ids for count %d, got %d.", "Ожидалось идентификаторов: %d (count %d), получено: %d.", n, n, len(ids)))
		}
		count = n
	}
	return ids, count, nil
}

// cloneNames are the names of count clones named name ("name-1", "name-2"... when several),
// refused when one is taken.
func (st *state) cloneNames(name string, count int) ([]string, *apiError) {
	names := []string{name}
	if count > 1 {
		names = make([]string, count)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", name, i+1)
		}
	}
	taken := map[string]bool{}
	for _, d := range st.domains {
		taken[d.name] = true
	}
	for _, n := range names {
		if taken[n] {
			return nil, errField("verbose_name", "unique", txtf("A virtual machine named %s already exists.", "Виртуальная машина с именем %s уже существует.", n))
		}
	}
	return names, nil
}

// clonePlace is the node and data pool of a clone of src: the body's, or src's.
func (st *state) clonePlace(body map[string]any, src *domain) (*node, *datapool, *apiError) {
	n := src.node
	if v, e := stringField(body, "node", false); e != nil {
		return nil, nil, e
	} else if v != "" {
		if n = st.nodeByID[v]; n == nil {
			return nil, nil, errField("node", "invalid", txt("Node is not found.", "Узел не найден."))
		}
	}
	pool := src.pool
	if v, e := stringField(body, "datapool", false); e != nil {
		return nil, nil, e
	} else if v != "" {
		if pool = st.poolByID[v]; pool == nil {
			return nil, nil, errField("datapool", "invalid", txt("Data pool is not found.", "Пул данных не найден."))
		}
	}
	return n, pool, nil
}

// startMultiClone starts the multitask of a clone with count > 1 and a task per VM; the
// multitask ends just after them and sums them up.
func (st *state) startMultiClone(now time.Time, src *domain, clones []*domain, key, user string) *task {
	list := func(now time.Time) any {
		out := make([]any, 0, len(clones))
		for _, c := range clones {
			if _, ok := st.domainByID[c.id]; ok {
				out = append(out, c.detail(now))
			}
		}
		return out
	}
	var children []*task
	parent := st.startTask(now, taskSpec{
		name: nameMultiClone(src, len(clones)), key: key, user: user,
		entities: domainEnts(append(slices.Clone(clones), src)...),
		duration: st.opts.TaskDuration + time.Microsecond,
		apply: func(time.Time) error {
			var ok int
			for _, c := range children {
				if c.status == "SUCCESS" {
					ok++
				}
			}
			switch ok {
			case len(children):
				return nil
			case 0:
				return textError(txt("No virtual machine was created.", "Ни одна виртуальная машина не создана."))
			}
			return partialError(txtf("%d of %d virtual machines were created.", "Создано %d из %d виртуальных машин.", ok, len(children)))
		},
		entity:   list,
		response: list,
	})
	parent.multitask = true
	for _, c := range clones {
		children = append(children, st.startTask(now, taskSpec{
			name: nameClone(c, src), user: user, parent: parent.id,
			entities: domainEnts(c, src),
			apply:    st.cloneDone(c),
			entity:   st.domainEntity(c),
		}))
	}
	return parent
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		d, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		if _, e := boolField(body, "full", false); e != nil {
			return nil, e
		}
		if d.template && s.st.hasThinClones(d) {
			return nil, errRule(txtf("Template %s has thin clones and cannot be removed: that would break them.", "У шаблона %s есть тонкие клоны, его нельзя удалить: это нарушит их работу.", d.name))
		}
		if d.status == "DELETING" {
			return nil, errRule(txtf("Virtual machine %s is already being deleted.", "Виртуальная машина %s уже удаляется.", d.name))
		}
		d.status = "DELETING"
		s.st.changed(ChangeUpdated, d)
		return s.st.startTask(now, taskSpec{
			name: nameRemove(d), key: key, user: user,
			entities: domainEnts(d),
			apply: func(time.Time) error {
				s.st.removeDomain(d)
				return nil
			},
		}), nil
	})
}

func (s *Server) sshInject(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		d, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		sshKey, e := stringField(body, "ssh_key", true)
		if e != nil {
			return nil, e
		}
		sshUser, e := stringField(body, "ssh_user", false)
		if e != nil {
			return nil, e
		}
		if sshUser == "" {
			sshUser = "root"
		}
		if _, e := boolField(body, "create_user", false); e != nil {
			return nil, e
		}
		if !d.linux {
			return nil, errRule(txt("SSH key injection is available for Linux guests only.", "Добавление SSH-ключей доступно только для гостевых ОС Linux."))
		}
		if d.power == powerOn && !d.agentActive() {
			return nil, errRule(txt("SSH key injection into a running virtual machine needs an active guest agent.", "Для добавления SSH-ключей в запущенную виртуальную машину нужен активный гостевой агент."))
		}
		if d.power != powerOn && d.power != powerOff {
			return nil, errRule(txt("The virtual machine must be powered off, or on with an active guest agent.", "Виртуальная машина должна быть выключена или включена с активным гостевым агентом."))
		}
		return s.st.startTask(now, taskSpec{
			name: nameSSHInject(d), key: key, user: user, entities: domainEnts(d),
			apply: func(time.Time) error {
				if err := s.st.gone(d); err != nil {
					return err
				}
				if d.sshKeys == nil {
					d.sshKeys = map[string][]string{}
				}
				d.sshKeys[sshUser] = append(d.sshKeys[sshUser], sshKey)
				return nil
			},
			entity: s.st.domainEntity(d),
		}), nil
	})
}

func (s *Server) setTemplate(w http.ResponseWriter, r *http.Request, id string) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		d, e := s.st.lookupDomain(id)
		if e != nil {
			return nil, e
		}
		on, e := boolField(body, "template", true)
		if e != nil {
			return nil, e
		}
		if d.template && s.st.hasThinClones(d) {
			return nil, errRule(txtf("Template %s has thin clones and cannot be modified: merge a prepared thin clone into it instead.", "У шаблона %s есть тонкие клоны, его нельзя изменять: вместо этого слейте с ним подготовленный тонкий клон.", d.name))
		}
		if on && d.power == powerOn {
			return nil, errRule(txtf("Virtual machine %s must be powered off to become a template.", "Виртуальная машина %s должна быть выключена, чтобы стать шаблоном.", d.name))
		}
		return s.st.startTask(now, taskSpec{
			name: nameTemplate(d, on), key: key, user: user,
			entities: domainEnts(d),
			apply: func(time.Time) error {
				if err := s.st.gone(d); err != nil {
					return err
				}
				d.template = on
				s.st.changed(ChangeUpdated, d)
				return nil
			},
			entity: s.st.domainEntity(d),
		}), nil
	})
}

func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	s.operate(w, r, func(w http.ResponseWriter, now time.Time, body map[string]any, key, user string) (*task, *apiError) {
		id, e := stringField(body, "domain", true)
		if e != nil {
			return nil, e
		}
		d, ok := s.st.domainByID[id]
		if !ok {
			return nil, errField("domain", "invalid", txt("Virtual machine is not found.", "Виртуальная машина не найдена."))
		}
		pool := d.pool
		if v, e := stringField(body, "datapool", false); e != nil {
			return nil, e
		} else if v != "" {
			if pool = s.st.poolByID[v]; pool == nil {
				return nil, errField("datapool", "invalid", txt("Data pool is not found.", "Пул данных не найден."))
			}
		}
		if _, e := boolField(body, "compress", false); e != nil {
			return nil, e
		}
		if v, ok := body["limit_days"]; ok && v != nil {
			n, isNum := v.(json.Number)
			if _, err := strconv.Atoi(string(n)); !isNum || err != nil {
				return nil, errField("limit_days", "invalid", txt("A valid integer is required.", "Требуется целое число."))
			}
		}
		return s.st.startTask(now, taskSpec{
			name: nameBackup(d), key: key, user: user,
			entities: domainEnts(d),
			apply: func(time.Time) error {
				if err := s.st.gone(d); err != nil {
					return err
				}
				if pool != nil {
					pool.files++
					pool.used = min(pool.sizeMiB, pool.used+d.memMiB)
					s.st.changed(ChangeUpdated, pool)
				}
				return nil
			},
		}), nil
	})
}

// cloneSpec is what a clone is: its id ("" draws one), name, node and pool.
type cloneSpec struct {
	id, name string
	node     *node
	pool     *datapool
}

// cloneOf adds a VM in CREATING made from src as spec says (a template's clone is thin: the
// template stays its parent). cloneDone is its task's apply.
func (st *state) cloneOf(src *domain, spec cloneSpec, now time.Time) *domain {
	c := st.newDomain(now)
	if spec.id != "" {
		c.id = spec.id
	}
	c.name, c.node, c.pool = spec.name, spec.node, spec.pool
	c.cpus, c.memMiB, c.linux, c.agent, c.vdisks = src.cpus, src.memMiB, src.linux, src.agent, src.vdisks
	c.power, c.status = powerOff, "CREATING"
	if src.template {
		c.thin, c.parent = true, src
	}
	st.addDomainLike(c, src)
	return c
}

func (st *state) cloneDone(c *domain) func(time.Time) error {
	return func(time.Time) error {
		if err := st.gone(c); err != nil {
			return err
		}
		c.status = "ACTIVE"
		st.changed(ChangeUpdated, c)
		return nil
	}
}
