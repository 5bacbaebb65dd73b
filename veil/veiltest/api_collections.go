package veiltest

// This file holds the read side of the API: each collection's list (filters, ordering, one
// page) and its detail, for nodes, clusters, datapools, domains, tasks (with a task's response)
// and events, and the controller's version.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// writeOrdered writes one page of items given in the collection's default order, ordered
// first by the request's ordering when it is not empty.
func writeOrdered(w http.ResponseWriter, r *http.Request, p pageReq, items [][]byte, ordering string) {
	if ordering != "" {
		items = orderItems(items, ordering)
	}
	lo, hi := p.window(len(items))
	writePage(w, r, len(items), p, items[lo:hi])
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	s.st.advance(s.now())
	var wire []any
	for _, n := range s.st.nodes {
		if v, ok := filter(q, "cluster"); ok && n.cluster.id != v {
			continue
		}
		wire = append(wire, n.wire())
	}
	s.mu.Unlock()
	writeOrdered(w, r, p, encodeAll(wire), q.Get("ordering"))
}

// filter is the value of a filter parameter, if the request sets it.
func filter(q url.Values, name string) (string, bool) {
	v := q.Get(name)
	return v, v != ""
}

// detail answers one object: find looks it up under the state's lock, at now, and returns what
// to answer (encoded as JSON, or []byte already encoded); not found is the platform's 404 with
// notFound as its text.
func (s *Server) detail(w http.ResponseWriter, notFound text, find func(now time.Time) (any, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := find(s.now())
	switch b, raw := v.([]byte); {
	case !ok:
		writeError(w, errNotFound(notFound))
	case raw:
		writeJSONBytes(w, http.StatusOK, b)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Node is not found.", "Узел не найден."), func(now time.Time) (any, bool) {
		n, ok := s.st.nodeByID[id]
		if !ok {
			return nil, false
		}
		return n.detail(now), true
	})
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	wire := wireAll(s.st.clusters, func(c *cluster) any { return s.st.clusterWire(c, false) })
	s.mu.Unlock()
	writeOrdered(w, r, p, encodeAll(wire), q.Get("ordering"))
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Cluster is not found.", "Кластер не найден."), func(time.Time) (any, bool) {
		c, ok := s.st.clByID[id]
		if !ok {
			return nil, false
		}
		return s.st.clusterWire(c, true), true
	})
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	nodeF, byNode := filter(q, "node")
	clF, byCluster := filter(q, "cluster")
	s.mu.Lock()
	var wire []any
	for _, d := range s.st.pools {
		if byNode || byCluster {
			var found bool
			for _, n := range s.st.poolNodes(d) {
				if (!byNode || n.id == nodeF) && (!byCluster || n.cluster.id == clF) {
					found = true
					break
				}
			}
			if !found {
				continue
			}
		}
		wire = append(wire, s.st.poolWire(d))
	}
	s.mu.Unlock()
	writeOrdered(w, r, p, encodeAll(wire), q.Get("ordering"))
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Data pool is not found.", "Пул данных не найден."), func(time.Time) (any, bool) {
		d, ok := s.st.poolByID[id]
		if !ok {
			return nil, false
		}
		return s.st.poolWire(d), true
	})
}

func (s *Server) listDomains(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	match := domainFilter(q)
	ordering := q.Get("ordering")
	s.mu.Lock()
	s.st.advance(s.now())
	all := s.st.domains
	// Fast paths: the default order and verbose_name; any other ordering sorts the selection.
	desc := false
	switch ordering {
	case "verbose_name", "-verbose_name":
		all = s.st.sortedByName()
		desc, ordering = ordering[0] == '-', ""
	case "created", "-created":
		desc, ordering = ordering[0] == '-', ""
	}
	if match != nil {
		var sel []*domain
		for _, d := range all {
			if match(d) {
				sel = append(sel, d)
			}
		}
		all = sel
	}
	count := len(all)
	if ordering != "" {
		items := make([][]byte, count)
		for i, d := range all {
			items[i] = d.listBytes()
		}
		s.mu.Unlock()
		writeOrdered(w, r, p, items, ordering)
		return
	}
	lo, hi := p.window(count)
	items := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		j := i
		if desc {
			j = count - 1 - i
		}
		items = append(items, all[j].listBytes())
	}
	s.mu.Unlock()
	writePage(w, r, count, p, items)
}

// domainFilter builds the predicate for the domains collection filters; nil means all. A value
// that names nothing (an unknown id, an invalid boolean) matches nothing, as on the platform.
func domainFilter(q url.Values) func(*domain) bool {
	var preds []func(*domain) bool
	none := func(*domain) bool { return false }
	if v, ok := filter(q, "name"); ok {
		v = strings.ToLower(v)
		preds = append(preds, func(d *domain) bool { return strings.Contains(strings.ToLower(d.name), v) })
	}
	if v, ok := filter(q, "template"); ok {
		if b, ok := boolLike(v); ok {
			preds = append(preds, func(d *domain) bool { return d.template == b })
		} else {
			preds = append(preds, none)
		}
	}
	if v, ok := filter(q, "status"); ok {
		preds = append(preds, func(d *domain) bool { return d.status == v })
	}
	if v, ok := filter(q, "node"); ok {
		preds = append(preds, func(d *domain) bool { return d.node != nil && d.node.id == v })
	}
	if v, ok := filter(q, "cluster"); ok {
		preds = append(preds, func(d *domain) bool { return d.node != nil && d.node.cluster.id == v })
	}
	if v, ok := filter(q, "datapool"); ok {
		preds = append(preds, func(d *domain) bool { return d.pool != nil && d.pool.id == v })
	}
	if v, ok := filter(q, "resource_pool"); ok {
		// Only the alternative profile puts VMs in a resource pool.
		preds = append(preds, func(d *domain) bool { return d.alt && v == resourcePoolID })
	}
	if v, ok := filter(q, "power_state"); ok {
		ps, err := strconv.Atoi(v)
		if err != nil {
			names := map[string]int{"undefined": 0, "off": 1, "suspended": 2, "on": 3}
			var known bool
			if ps, known = names[strings.ToLower(v)]; !known {
				ps = -1
			}
		}
		preds = append(preds, func(d *domain) bool { return d.power == ps })
	}
	if v, ok := filter(q, "ids"); ok {
		set := map[string]bool{}
		for _, id := range strings.Split(v, ",") {
			set[strings.TrimSpace(id)] = true
		}
		preds = append(preds, func(d *domain) bool { return set[d.id] })
	}
	if len(preds) == 0 {
		return nil
	}
	return func(d *domain) bool {
		for _, p := range preds {
			if !p(d) {
				return false
			}
		}
		return true
	}
}

func (s *Server) getDomain(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Virtual machine is not found.", "Виртуальная машина не найдена."), func(now time.Time) (any, bool) {
		s.st.advance(now)
		d, ok := s.st.domainByID[id]
		if !ok {
			return nil, false
		}
		return d.detail(now), true
	})
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	status, byStatus := filter(q, "status")
	parent, byParent := filter(q, "parent")
	ordering := q.Get("ordering")
	asc := false // newest first unless asked
	switch ordering {
	case "created", "-created":
		asc, ordering = ordering == "created", ""
	}
	l := reqLang(r)
	s.mu.Lock()
	now := s.now()
	s.st.advance(now)
	sel := s.st.tasks
	if byStatus || byParent {
		sel = nil
		for _, t := range s.st.tasks {
			if (!byStatus || t.status == status) && (!byParent || t.parent == parent) {
				sel = append(sel, t)
			}
		}
	}
	count := len(sel)
	if ordering != "" {
		items := make([][]byte, count)
		for i := range sel {
			items[i] = s.st.taskBytes(sel[count-1-i], now, l)
		}
		s.mu.Unlock()
		writeOrdered(w, r, p, items, ordering)
		return
	}
	lo, hi := p.window(count)
	items := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		j := i
		if !asc {
			j = count - 1 - i
		}
		items = append(items, s.st.taskBytes(sel[j], now, l))
	}
	s.mu.Unlock()
	writePage(w, r, count, p, items)
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Task is not found.", "Задача не найдена."), func(now time.Time) (any, bool) {
		s.st.advance(now)
		t, ok := s.st.taskByID[id]
		if !ok {
			return nil, false
		}
		return s.st.taskDetail(t, now, reqLang(r)), true
	})
}

// taskResponse is the result of a task's operation (what a synchronous call answers): the
// created VM of a clone, the VM of a start... 400 while the task runs or when it failed.
func (s *Server) taskResponse(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	t, ok := s.st.taskByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Task is not found.", "Задача не найдена.")))
		return
	}
	l := reqLang(r)
	switch t.status {
	case "IN_PROGRESS":
		writeError(w, errRule(txt("The task is not finished yet.", "Задача ещё не завершена.")))
	case "SUCCESS":
		writeJSON(w, http.StatusOK, s.st.result(t, now, l))
	default:
		writeError(w, errRule(t.errMsg))
	}
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	typ, user, taskID := q.Get("type"), q.Get("user"), q.Get("task")
	asc := s.opts.EventsOrder == "oldest_first"
	ordering := q.Get("ordering")
	switch ordering {
	case "created", "-created":
		asc, ordering = ordering == "created", ""
	}
	l := reqLang(r)
	s.mu.Lock()
	s.st.advance(s.now())
	j := &s.st.events
	var sel []*event
	filtered := typ != "" || user != "" || taskID != ""
	if filtered {
		for i := range j.len() {
			ev := j.at(i)
			if (typ == "" || ev.typ == typ) && (user == "" || ev.user == user) && (taskID == "" || ev.task == taskID) {
				sel = append(sel, ev)
			}
		}
	}
	count := len(sel)
	at := func(i int) *event { return sel[i] }
	if !filtered {
		// The common case is index arithmetic over the journal: no per-request O(n) work.
		count, at = j.len(), j.at
	}
	if ordering != "" {
		items := make([][]byte, count)
		for i := range count {
			k := i
			if !asc {
				k = count - 1 - i
			}
			items[i] = at(k).bytes(l)
		}
		s.mu.Unlock()
		writeOrdered(w, r, p, items, ordering)
		return
	}
	lo, hi := p.window(count)
	items := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		k := i
		if !asc {
			k = count - 1 - i
		}
		items = append(items, at(k).bytes(l))
	}
	s.mu.Unlock()
	writePage(w, r, count, p, items)
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Event is not found.", "Событие не найдено."), func(time.Time) (any, bool) {
		ev, ok := s.st.events.byID[id]
		if !ok {
			return nil, false
		}
		return ev.bytes(reqLang(r)), true
	})
}

// baseVersion answers GET /api/controllers/base-version/ as SpaceVM does: {"version": "..."}; a
// controller older than the endpoint has no such URL.
func (s *Server) baseVersion(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if v == NoControllerVersion {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("URL is not found.", "URL не найден.")))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": v})
}

// SetControllerVersion changes what GET /api/controllers/base-version/ answers, as an upgrade
// of the controller would; NoControllerVersion makes it a 404 ("" restores the default).
func (s *Server) SetControllerVersion(v string) {
	if v == "" {
		v = DefaultControllerVersion
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
}
