package veiltest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// apiError is a §7 error: {"errors":[{"code":..,"msg_key":..,<msg_key>:..}]}, its message in
// the request's language.
type apiError struct {
	status int
	code   string
	key    string // msg_key: detail, non_field_errors or a field name
	msg    text
}

func (e *apiError) body(l lang) []byte {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": e.code, "msg_key": e.key, e.key: e.msg.in(l)}}})
	return b
}

// writeError writes e in the language of the request being answered (see langOf).
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSONBytes(w, e.status, e.body(langOf(w)))
}

func errDetail(status int, code string, msg text) *apiError {
	return &apiError{status: status, code: code, key: "detail", msg: msg}
}

func errField(field, code string, msg text) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, key: field, msg: msg}
}

func errRule(msg text) *apiError { return errDetail(http.StatusBadRequest, "400", msg) }

func errNotFound(msg text) *apiError { return errDetail(http.StatusNotFound, "50004", msg) }

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, errDetail(500, "500", txt("Encoding failed.", "Ошибка кодирования ответа.")))
		return
	}
	writeJSONBytes(w, status, b)
}

type handlers map[string]http.HandlerFunc

// serveAPI resolves the path (404), then checks credentials (401/403), then the method (405).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	p := strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/"), "/")
	segs := strings.Split(p, "/")
	hs := s.resolve(segs)
	if hs == nil {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("URL is not found.", "URL не найден.")))
		return
	}
	user, e := s.authenticate(r)
	if e != nil {
		writeError(w, e)
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	h, ok := hs[method]
	if !ok {
		allowed := make([]string, 0, len(hs))
		for m := range hs {
			allowed = append(allowed, m)
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, errDetail(http.StatusMethodNotAllowed, "405", txtf("Method %q not allowed.", "Метод %q не разрешён.", r.Method)))
		return
	}
	if method != http.MethodGet && user == "viewer" {
		writeError(w, errDetail(http.StatusForbidden, "403", txt("You do not have permission to perform this action.", "У вас недостаточно прав для выполнения данного действия.")))
		return
	}
	r = r.WithContext(withUser(r.Context(), user))
	if fields := r.URL.Query().Get("fields"); fields != "" && method == http.MethodGet {
		withFields(w, r, fields, h)
		return
	}
	h(w, r)
}

func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", errDetail(http.StatusUnauthorized, "401", txt("Authentication credentials were not provided.", "Учетные данные не были предоставлены."))
	}
	scheme, tok, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "jwt") {
		return "", errDetail(http.StatusUnauthorized, "401", txt("Invalid authorization header: expected 'jwt <token>'.", "Неверный заголовок авторизации: ожидается 'jwt <token>'."))
	}
	switch {
	case tok == s.opts.Token:
		return "admin", nil
	case s.opts.ReadOnlyToken != "" && tok == s.opts.ReadOnlyToken:
		return "viewer", nil
	}
	return "", errDetail(http.StatusUnauthorized, "401", txt("Invalid token.", "Недействительный токен."))
}

func (s *Server) resolve(segs []string) handlers {
	n := len(segs)
	switch segs[0] {
	case "docs":
		if n == 1 {
			return handlers{"GET": s.docs}
		}
	case "nodes":
		switch {
		case n == 1:
			return handlers{"GET": s.listNodes}
		case n == 2:
			return handlers{"GET": func(w http.ResponseWriter, r *http.Request) { s.getNode(w, r, segs[1]) }}
		case n == 3 && segs[2] == "ballooning":
			return handlers{"PUT": func(w http.ResponseWriter, r *http.Request) { s.ballooning(w, r, segs[1]) }}
		}
	case "clusters", "data-pools", "tasks", "events":
		// Read-only collections: a list and a detail.
		list, get := map[string]http.HandlerFunc{
			"clusters": s.listClusters, "data-pools": s.listPools, "tasks": s.listTasks, "events": s.listEvents,
		}[segs[0]], map[string]func(http.ResponseWriter, *http.Request, string){
			"clusters": s.getCluster, "data-pools": s.getPool, "tasks": s.getTask, "events": s.getEvent,
		}[segs[0]]
		switch {
		case n == 1:
			return handlers{"GET": list}
		case n == 2:
			return handlers{"GET": func(w http.ResponseWriter, r *http.Request) { get(w, r, segs[1]) }}
		case n == 3 && segs[0] == "tasks" && segs[2] == "response":
			return handlers{"GET": func(w http.ResponseWriter, r *http.Request) { s.taskResponse(w, r, segs[1]) }}
		}
	case "domains":
		switch {
		case n == 1:
			return handlers{"GET": s.listDomains}
		case n == 2 && segs[1] == "backup":
			return handlers{"POST": s.backup}
		case n == 2:
			return handlers{"GET": func(w http.ResponseWriter, r *http.Request) { s.getDomain(w, r, segs[1]) }}
		case n == 3:
			id := segs[1]
			op := func(f func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) { f(w, r, id) }
			}
			switch segs[2] {
			case "start":
				return handlers{"POST": op(s.start)}
			case "shutdown":
				return handlers{"POST": op(s.shutdown)}
			case "clone":
				return handlers{"POST": op(s.clone)}
			case "remove":
				return handlers{"POST": op(s.remove)}
			case "ssh-inject":
				return handlers{"POST": op(s.sshInject)}
			case "template":
				return handlers{"PUT": op(s.setTemplate)}
			case "available-guest-cmds":
				return handlers{"GET": op(s.availableGuestCmds)}
			case "guest-command":
				return handlers{"POST": op(s.guestCommand)}
			}
		}
	}
	return nil
}

var endpoints = []string{
	"GET /api/docs/",
	"GET /api/nodes/", "GET /api/nodes/{id}/", "PUT /api/nodes/{id}/ballooning/",
	"GET /api/clusters/", "GET /api/clusters/{id}/",
	"GET /api/data-pools/", "GET /api/data-pools/{id}/",
	"GET /api/domains/", "GET /api/domains/{id}/", "POST /api/domains/{id}/start/",
	"POST /api/domains/{id}/shutdown/", "POST /api/domains/{id}/clone/", "POST /api/domains/{id}/remove/",
	"POST /api/domains/{id}/ssh-inject/", "PUT /api/domains/{id}/template/", "POST /api/domains/backup/",
	"GET /api/domains/{id}/available-guest-cmds/", "POST /api/domains/{id}/guest-command/",
	"GET /api/tasks/", "GET /api/tasks/{id}/", "GET /api/tasks/{id}/response/", "GET /api/events/", "GET /api/events/{id}/",
}

func (s *Server) docs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"title":        "VeiL platform API (veiltest simulator)",
		"endpoints":    endpoints,
		"pagination":   "limit (0..100, default 100, larger values are clamped), offset",
		"async":        "state-changing operations: with ?async=1 202 and {_task, _entity} (profile alternative: {_task, entity}); without it 200 and the resource once the task is done",
		"profile":      s.opts.Profile,
		"languages":    "Accept-Language: en (default) or ru",
		"auth":         "Authorization: jwt <token>",
		"events_order": s.opts.EventsOrder,
	})
}

// ---- paging ----

type pageReq struct{ limit, offset int }

const maxLimit = 100

func parsePaging(q url.Values) (pageReq, *apiError) {
	p := pageReq{limit: maxLimit}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"limit", &p.limit}, {"offset", &p.offset}} {
		v, ok := q[f.name]
		if !ok || len(v) == 0 || v[0] == "" {
			continue
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 {
			return p, errField(f.name, "invalid", txtf("%s must be a non-negative integer.", "%s должно быть неотрицательным целым числом.", f.name))
		}
		*f.dst = n
	}
	p.limit = min(p.limit, maxLimit)
	return p, nil
}

// window returns the [lo, hi) indexes of the page within count items.
func (p pageReq) window(count int) (int, int) {
	lo := min(p.offset, count)
	return lo, min(lo+p.limit, count)
}

func pageURL(r *http.Request, limit, offset int) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	q := r.URL.Query()
	q.Set("limit", strconv.Itoa(limit))
	if offset > 0 {
		q.Set("offset", strconv.Itoa(offset))
	} else {
		q.Del("offset")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// writePage writes a DRF envelope around pre-encoded items.
func writePage(w http.ResponseWriter, r *http.Request, count int, p pageReq, items [][]byte) {
	size := 96
	for _, it := range items {
		size += len(it) + 1
	}
	var b bytes.Buffer
	b.Grow(size + 2*len(r.URL.Path) + 64)
	b.WriteString(`{"count":`)
	b.WriteString(strconv.Itoa(count))
	b.WriteString(`,"next":`)
	if p.limit > 0 && p.offset+p.limit < count {
		writeJSONString(&b, pageURL(r, p.limit, p.offset+p.limit))
	} else {
		b.WriteString("null")
	}
	b.WriteString(`,"previous":`)
	if p.offset > 0 && p.limit > 0 {
		writeJSONString(&b, pageURL(r, p.limit, max(0, min(p.offset, count)-p.limit)))
	} else {
		b.WriteString("null")
	}
	b.WriteString(`,"results":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	writeJSONBytes(w, http.StatusOK, b.Bytes())
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

// wireAll builds the wire form of xs; call it under s.mu. The values share nothing with the
// state, so they are encoded (encodeAll) after the lock is released: a large page (datapools
// listing hundreds of connected nodes each) must not hold up every other request.
func wireAll[T any](xs []T, f func(T) any) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func encodeAll(vs []any) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i], _ = json.Marshal(v)
	}
	return out
}

// ---- collections and details ----

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

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.st.nodeByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Node is not found.", "Узел не найден.")))
		return
	}
	writeJSON(w, http.StatusOK, n.detail(s.now()))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.st.clByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Cluster is not found.", "Кластер не найден.")))
		return
	}
	writeJSON(w, http.StatusOK, s.st.clusterWire(c, true))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.st.poolByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Data pool is not found.", "Пул данных не найден.")))
		return
	}
	writeJSON(w, http.StatusOK, s.st.poolWire(d))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	d, ok := s.st.domainByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Virtual machine is not found.", "Виртуальная машина не найдена.")))
		return
	}
	writeJSON(w, http.StatusOK, d.detail(now))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.st.advance(now)
	t, ok := s.st.taskByID[id]
	if !ok {
		writeError(w, errNotFound(txt("Task is not found.", "Задача не найдена.")))
		return
	}
	writeJSON(w, http.StatusOK, s.st.taskDetail(t, now, reqLang(r)))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, ok := s.st.events.byID[id]
	if !ok {
		writeError(w, errNotFound(txt("Event is not found.", "Событие не найдено.")))
		return
	}
	writeJSONBytes(w, http.StatusOK, ev.bytes(reqLang(r)))
}

// ---- request bodies ----

func readBody(r *http.Request) (map[string]any, *apiError) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, errDetail(http.StatusBadRequest, "invalid", txt("Couldn't read the request body.", "Не удалось прочитать тело запроса."))
	}
	body := map[string]any{}
	if len(bytes.TrimSpace(b)) == 0 {
		return body, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&body); err != nil {
		return nil, errDetail(http.StatusBadRequest, "invalid", txtf("JSON parse error: %s", "Ошибка разбора JSON: %s", err.Error()))
	}
	return body, nil
}

// boolLike accepts the platform's boolean-like values: true/false, "true"/"false", 1/0, "1"/"0".
func boolLike(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case json.Number:
		switch x.String() {
		case "1":
			return true, true
		case "0":
			return false, true
		}
	case string:
		switch strings.ToLower(x) {
		case "true", "1", "yes", "on":
			return true, true
		case "false", "0", "no", "off":
			return false, true
		}
	}
	return false, false
}

func boolField(body map[string]any, name string, required bool) (bool, *apiError) {
	v, ok := body[name]
	if !ok || v == nil {
		if required {
			return false, errField(name, "required", txt("This field is required.", "Обязательное поле."))
		}
		return false, nil
	}
	b, ok := boolLike(v)
	if !ok {
		return false, errField(name, "invalid", txt("Must be a valid boolean.", "Должно быть логическим значением."))
	}
	return b, nil
}

func stringField(body map[string]any, name string, required bool) (string, *apiError) {
	v, ok := body[name]
	if !ok || v == nil || v == "" {
		if required {
			return "", errField(name, "required", txt("This field is required.", "Обязательное поле."))
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", errField(name, "invalid", txt("Not a valid string.", "Недопустимая строка."))
	}
	return s, nil
}

func idempotencyKey(body map[string]any) (string, *apiError) {
	k, e := stringField(body, "idempotency_key", false)
	if e != nil {
		return "", e
	}
	if k != "" && !isUUID(k) {
		return "", errField("idempotency_key", "invalid", txt("Must be a valid UUID.", "Должно быть корректным UUID."))
	}
	return strings.ToLower(k), nil
}

func isAsync(r *http.Request) bool {
	v := r.URL.Query().Get("async")
	return v == "1" || strings.EqualFold(v, "true")
}

// respondTask answers 202 with the envelope at once (?async=1). Without it, it waits until the
// task is final and answers 200 with the operation's result, as the vendor's mock does and its
// Go client expects: the resource (the VM for start, shutdown, template), what was created
// (clone), or the final task for operations without one; a failed task answers 400 with its
// error message.
func (s *Server) respondTask(w http.ResponseWriter, r *http.Request, t *task) {
	l := reqLang(r)
	if isAsync(r) {
		s.mu.Lock()
		env := s.st.envelope(t, s.now(), l)
		s.mu.Unlock()
		writeJSON(w, http.StatusAccepted, env)
		return
	}
	select {
	case <-t.done:
	case <-r.Context().Done():
		return
	case <-s.stop:
		writeError(w, errDetail(http.StatusServiceUnavailable, "503", txt("The simulator is shutting down.", "Симулятор останавливается.")))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.status != "SUCCESS" {
		writeError(w, errDetail(http.StatusBadRequest, "400", t.errMsg))
		return
	}
	writeJSON(w, http.StatusOK, s.st.result(t, s.now(), l))
}
