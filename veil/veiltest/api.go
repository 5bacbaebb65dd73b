package veiltest

// This file holds the API's front door: §7 error bodies and JSON answers, routing,
// authentication and /api/docs/, then the request bodies of the state-changing operations and
// how they answer with a task (the operations themselves are in ops.go and guest.go).

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
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
