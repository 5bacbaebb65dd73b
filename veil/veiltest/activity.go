package veiltest

// This file is the life of the platform when nobody calls it: at Options.EventRate the
// simulator runs the operations an operator or a scheduler would (VMs stopped and started,
// backups, clones and their removal, migrations) as tasks with their journal events, and guest
// agents stop answering and come back. Inventory, tasks and events so tell one story. The
// activity never touches a VM that a client's operation or a control call has touched, nor one
// with a task running, so scenarios stay under the test's control.

import (
	"fmt"
	"time"
)

// Task names: sentences naming the entities, as the platform writes them.
func nameStart(d *domain) text {
	return txtf("Starting the virtual machine %s.", "Запуск виртуальной машины %s.", d.name)
}

func nameShutdown(d *domain, force bool) text {
	if force {
		return txtf("Forced shutdown of the virtual machine %s.", "Принудительное выключение виртуальной машины %s.", d.name)
	}
	return txtf("Shutting down the virtual machine %s.", "Выключение виртуальной машины %s.", d.name)
}

// nameClone: vendor code finds clone tasks by "Creating a virtual" and thin clones by a
// trailing "snapshot.".
func nameClone(c, src *domain) text {
	if src.template {
		return txtf("Creating a virtual machine %s as a thin clone of the template %s snapshot.",
			"Создание виртуальной машины %s тонким клоном из снимка шаблона %s.", c.name, src.name)
	}
	return txtf("Creating a virtual machine %s by cloning the virtual machine %s.",
		"Создание виртуальной машины %s клонированием виртуальной машины %s.", c.name, src.name)
}

// nameMultiClone is the parent task of a clone with count > 1.
func nameMultiClone(src *domain, n int) text {
	return txtf("Creating %d virtual machines from the virtual machine %s.",
		"Создание %d виртуальных машин из виртуальной машины %s.", n, src.name)
}

func nameRemove(d *domain) text {
	return txtf("Deleting the virtual machine %s.", "Удаление виртуальной машины %s.", d.name)
}

func nameSSHInject(d *domain) text {
	return txtf("Adding SSH keys to the virtual machine %s.", "Добавление SSH-ключей в виртуальную машину %s.", d.name)
}

func nameTemplate(d *domain, on bool) text {
	if on {
		return txtf("Converting the virtual machine %s to a template.", "Преобразование виртуальной машины %s в шаблон.", d.name)
	}
	return txtf("Converting the template %s to a virtual machine.", "Преобразование шаблона %s в виртуальную машину.", d.name)
}

func nameBackup(d *domain) text {
	return txtf("Backup of the virtual machine %s.", "Резервное копирование виртуальной машины %s.", d.name)
}

func nameMigrate(d *domain, n *node) text {
	return txtf("Migrating the virtual machine %s to the node %s.", "Миграция виртуальной машины %s на узел %s.", d.name, n.name)
}

func nameBallooning(n *node) text {
	return txtf("Changing memory ballooning of the node %s.", "Изменение балунинга памяти узла %s.", n.name)
}

// gone is the failure of a task whose domain was deleted while it ran.
func (st *state) gone(d *domain) error {
	if _, ok := st.domainByID[d.id]; !ok {
		return textError(txtf("The virtual machine %s no longer exists.", "Виртуальная машина %s больше не существует.", d.name))
	}
	return nil
}

// seedTasks writes finished tasks in the past so the journal is not empty at start. Their
// events have left the journal (the platform keeps tasks longer than events), so a seeded
// task's detail lists none.
func (st *state) seedTasks(now time.Time) {
	t := now.Add(-2 * time.Hour)
	for range st.opts.InitialTasks {
		var ents taskEntities
		name := txt("Refreshing the controller licence.", "Обновление лицензии контроллера.")
		if len(st.domains) > 0 {
			d := st.domains[st.rng.IntN(len(st.domains))]
			ents = domainEnts(d)
			switch k := st.rng.IntN(5); {
			case d.thin && d.parent != nil && k == 0:
				ents = domainEnts(d, d.parent)
				name = nameClone(d, d.parent)
			case k == 1:
				name = nameShutdown(d, false)
			case k == 2:
				name = nameBackup(d)
			case k == 3:
				name = nameSSHInject(d)
			default:
				name = nameStart(d)
			}
		}
		dur := time.Duration(1+st.rng.IntN(30000)) * time.Millisecond
		tk := &task{id: st.uuid(), name: name, status: "SUCCESS", created: t, finished: t.Add(dur),
			deadline: t.Add(dur), user: "admin", entities: ents, done: make(chan struct{})}
		if st.rng.IntN(10) == 0 {
			tk.status, tk.errMsg = "FAILED", txt("Operation timed out.", "Время выполнения операции истекло.")
		}
		close(tk.done)
		st.tasks = append(st.tasks, tk)
		st.taskByID[tk.id] = tk
		t = t.Add(time.Duration(1+st.rng.IntN(300)) * time.Second)
	}
}

// idle picks a random VM the background may work on and that satisfies ok; nil if a few draws
// find none.
func (st *state) idle(ok func(*domain) bool) *domain {
	if len(st.domains) == 0 {
		return nil
	}
	for range 24 {
		d := st.domains[st.rng.IntN(len(st.domains))]
		if !d.pinned && d.busy == 0 && d.status == "ACTIVE" && ok(d) {
			return d
		}
	}
	return nil
}

// Background operations take longer than a client's (Options.TaskDuration times these), so a
// demo shows tasks running.
const (
	bgPowerTasks  = 2
	bgMigrateTask = 5
	bgCloneTask   = 8
	bgBackupTask  = 15
	bgMaxClones   = 3 // the background removes its oldest clone before making a fourth
)

// activity starts one background operation at instant at and returns how many journal events
// it writes (including those its task writes when it ends).
func (st *state) activity(at time.Time) int {
	var n int
	switch r := st.rng.IntN(12); {
	case r < 4:
		n = st.bgPower(at)
	case r < 7:
		n = st.bgBackup(at)
	case r < 8:
		n = st.bgMigrate(at)
	case r < 10:
		n = st.bgClone(at)
	default:
		n = st.bgAgent(at)
	}
	if n == 0 { // nothing fits (a tiny or busy inventory): a plain event keeps the rate
		st.randomEvent(at, EventSpec{})
		n = 1
	}
	return n
}

func (st *state) bgDuration(f int) time.Duration { return st.opts.TaskDuration * time.Duration(f) }

func (st *state) startBackground(at time.Time, sp taskSpec) {
	st.startTask(at, sp).background = true
}

// stopActivity ends the background activity at now: its running tasks finish and a lost guest
// agent comes back at once, so the journal holds still from then on (SetEventRate(0)).
func (st *state) stopActivity(now time.Time) {
	for _, t := range st.running {
		if t.background && t.deadline.After(now) {
			t.deadline = now
		}
	}
	st.advance(now)
	if st.agentLost != nil {
		st.bgAgent(now)
	}
}

// bgPower starts a stopped VM or shuts a running one down, keeping about RunningFraction on.
func (st *state) bgPower(at time.Time) int {
	on := 0
	for _, n := range st.nodes {
		on += n.on
	}
	start := float64(on) < st.opts.RunningFraction*float64(len(st.domains))
	d := st.idle(func(d *domain) bool { return !d.template && (d.power == powerOn) != start })
	if d == nil {
		return 0
	}
	sp := taskSpec{user: "admin", entities: domainEnts(d), duration: st.bgDuration(bgPowerTasks)}
	if start {
		sp.name = nameStart(d)
		sp.apply = func(at time.Time) error {
			if err := st.gone(d); err != nil {
				return err
			}
			st.setPower(d, powerOn, at)
			return nil
		}
	} else {
		sp.name = nameShutdown(d, false)
		sp.apply = func(at time.Time) error {
			if err := st.gone(d); err != nil {
				return err
			}
			st.setPower(d, powerOff, at)
			return nil
		}
	}
	st.startBackground(at, sp)
	return 2
}

// bgBackup backs a VM up; one in ten fails for lack of space on its data pool.
func (st *state) bgBackup(at time.Time) int {
	d := st.idle(func(d *domain) bool { return !d.template })
	if d == nil {
		return 0
	}
	fail := st.rng.IntN(10) == 0
	st.startBackground(at, taskSpec{name: nameBackup(d), user: "system", entities: domainEnts(d),
		duration: st.bgDuration(bgBackupTask),
		apply: func(time.Time) error {
			if err := st.gone(d); err != nil {
				return err
			}
			if d.pool == nil {
				return nil
			}
			if fail {
				return textError(txtf("Not enough free space on the data pool %s.", "Недостаточно свободного места в пуле данных %s.", d.pool.name))
			}
			d.pool.files++
			d.pool.used = min(d.pool.sizeMiB, d.pool.used+d.memMiB/4)
			st.changed(ChangeUpdated, d.pool)
			return nil
		}})
	return 2
}

// bgMigrate moves a running VM to another node of its cluster.
func (st *state) bgMigrate(at time.Time) int {
	d := st.idle(func(d *domain) bool { return d.power == powerOn && d.node != nil })
	if d == nil {
		return 0
	}
	var to []*node
	for _, n := range st.nodes {
		if n != d.node && n.cluster == d.node.cluster && n.status == "ACTIVE" {
			to = append(to, n)
		}
	}
	if len(to) == 0 {
		return 0
	}
	n := to[st.rng.IntN(len(to))]
	st.startBackground(at, taskSpec{name: nameMigrate(d, n), user: "admin",
		entities: taskEntities{{d.id, "domain"}, {n.id, "node"}}, duration: st.bgDuration(bgMigrateTask),
		apply: func(at time.Time) error {
			if err := st.gone(d); err != nil {
				return err
			}
			st.moveDomain(d, n, at)
			return nil
		}})
	return 2
}

// bgClone clones a template (thin) or a VM; past bgMaxClones it deletes its oldest clone instead.
func (st *state) bgClone(at time.Time) int {
	if len(st.bgClones) >= bgMaxClones {
		d := st.bgClones[0]
		if d.busy > 0 {
			return 0
		}
		st.bgClones = st.bgClones[1:]
		if _, ok := st.domainByID[d.id]; !ok {
			return 0
		}
		d.status = "DELETING"
		st.changed(ChangeUpdated, d)
		st.startBackground(at, taskSpec{name: nameRemove(d), user: "admin", entities: domainEnts(d),
			duration: st.bgDuration(bgPowerTasks),
			apply:    func(time.Time) error { st.removeDomain(d); return nil }})
		return 2
	}
	src := st.idle(func(d *domain) bool { return d.template || d.power == powerOff })
	if src == nil {
		return 0
	}
	c := st.cloneOf(src, cloneSpec{name: fmt.Sprintf("%s-clone-%d", src.name, st.vmSeq+1), node: src.node, pool: src.pool}, at)
	st.bgClones = append(st.bgClones, c)
	st.startBackground(at, taskSpec{name: nameClone(c, src), user: "admin", entities: domainEnts(c, src),
		duration: st.bgDuration(bgCloneTask), apply: st.cloneDone(c)})
	return 2
}

// bgAgent makes one running VM's guest agent stop answering, or brings it back.
func (st *state) bgAgent(at time.Time) int {
	if d := st.agentLost; d != nil {
		st.agentLost = nil
		if _, ok := st.domainByID[d.id]; !ok || d.pinned {
			return 0
		}
		d.agentUp = true
		st.changed(ChangeUpdated, d)
		st.newEvent(at, event{typ: "info", user: "system", msg: txtf("Guest agent of the virtual machine %s is connected.",
			"Гостевой агент виртуальной машины %s подключён.", d.name), ents: []eventEntity{{d.id, "domain"}}})
		return 1
	}
	d := st.idle(func(d *domain) bool { return d.power == powerOn && d.agentActive() && !d.hang })
	if d == nil {
		return 0
	}
	st.agentLost = d
	d.agentUp = false
	st.changed(ChangeUpdated, d)
	st.newEvent(at, event{typ: "warning", user: "system", msg: txtf("Guest agent of the virtual machine %s is not responding.",
		"Гостевой агент виртуальной машины %s не отвечает.", d.name), ents: []eventEntity{{d.id, "domain"}}})
	return 1
}
