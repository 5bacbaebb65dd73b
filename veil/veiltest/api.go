package veiltest

// This file holds the API's front door: error bodies ({"errors":[...]}) and JSON answers, the order of the checks
// (404, 401/403, 405; the route table and /api/docs/ are in routes.go), then the request bodies
// of the state-changing operations and how they answer with a task (the operations themselves
// are in ops.go and guest.go).

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// apiError is an error answer: {"errors":[{"code":..,"msg_key":..,<msg_key>:..}]}, its message in
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

// serveAPI resolves the path (404), then checks credentials (401/403), then the method (405),
// then serves the route of the table (routes.go).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		r = r.Clone(r.Context())
		r.Method = http.MethodGet
	}
	pattern, allowed := s.match(r)
	if pattern == "" && len(allowed) == 0 {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("URL is not found.", "URL не найден.")))
		return
	}
	if s.isPublic(pattern) {
		s.table.ServeHTTP(w, r)
		return
	}
	user, e := s.authenticate(r)
	if e != nil {
		writeError(w, e)
		return
	}
	if pattern == "" {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, errDetail(http.StatusMethodNotAllowed, "405", txtf("Method %q not allowed.", "Метод %q не разрешён.", r.Method)))
		return
	}
	if r.Method != http.MethodGet && user == "viewer" {
		writeError(w, errDetail(http.StatusForbidden, "403", txt("You do not have permission to perform this action.", "У вас недостаточно прав для выполнения данного действия.")))
		return
	}
	r = r.WithContext(withUser(r.Context(), user))
	serve := s.table.ServeHTTP
	if r.Method == http.MethodGet {
		serve = func(w http.ResponseWriter, r *http.Request) { s.withOddFields(w, r, s.table.ServeHTTP) }
	}
	if fields := r.URL.Query().Get("fields"); fields != "" && r.Method == http.MethodGet {
		withFields(w, r, fields, serve)
		return
	}
	serve(w, r)
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
	if user, ok := s.userOf(tok); ok {
		return user, nil
	}
	return "", errDetail(http.StatusUnauthorized, "401", txt("Invalid token.", "Недействительный токен."))
}

// userOf is the user a token (without "jwt ") belongs to: admin for Options.Token, viewer for
// Options.ReadOnlyToken. The API and the push channel (push.go) both ask it.
func (s *Server) userOf(tok string) (string, bool) {
	switch {
	case tok == s.opts.Token:
		return "admin", true
	case s.opts.ReadOnlyToken != "" && tok == s.opts.ReadOnlyToken:
		return "viewer", true
	}
	return "", false
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
