package veiltest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"time"
)

// Fault makes matching /api/ requests fail in one way, or, with a "ws_" kind, the push channel
// (/ws/, push.go): "ws_refuse" answers an upgrade 404 as a controller without the channel;
// "ws_lose" drops a data frame silently, "ws_delay" sends it Latency after it was queued (the
// frames after it wait: order is kept), "ws_drop" closes the frame's socket without a close frame
// (the frame is lost). For the frame kinds Path matches the frame's resource ("/domains/"); Method
// plays no part. Rate and Count count upgrades or frames.
type Fault struct {
	Path    string        `json:"path"`   // path.Match pattern or prefix such as "/api/events/*"; "" = every /api/ path
	Method  string        `json:"method"` // "" = any method
	Rate    float64       `json:"rate"`   // fraction of matching requests; 0 means all
	Kind    string        `json:"kind"`   // "status" | "html" | "truncated" | "reset" | "wrong_types" | "latency" | "ws_refuse" | "ws_lose" | "ws_delay" | "ws_drop"
	Status  int           `json:"status"` // for "status" (default 500) and "html" (default 502)
	Latency time.Duration `json:"latency"`
	Count   int           `json:"count"` // how many times it fires; 0 = unlimited
}

// The fault kinds of the push channel.
const (
	kindPushRefuse = "ws_refuse"
	kindPushLose   = "ws_lose"
	kindPushDelay  = "ws_delay"
	kindPushDrop   = "ws_drop"
)

func (f *Fault) onPush() bool { return strings.HasPrefix(f.Kind, "ws_") }

type activeFault struct {
	Fault
	fired int
}

func (f *Fault) matches(r *http.Request) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, r.Method) {
		return false
	}
	return f.matchPath(r.URL.Path)
}

func (f *Fault) matchPath(p string) bool {
	if f.Path == "" {
		return true
	}
	if !strings.ContainsAny(f.Path, "*?[") {
		return strings.HasPrefix(p, f.Path)
	}
	if ok, _ := path.Match(f.Path, p); ok {
		return true
	}
	if ok, _ := path.Match(f.Path, strings.TrimSuffix(p, "/")); ok {
		return true
	}
	if prefix, ok := strings.CutSuffix(f.Path, "*"); ok && !strings.ContainsAny(prefix, "*?[") {
		return strings.HasPrefix(p, prefix)
	}
	return false
}

// SetFaults replaces the fault list; the first matching fault that fires wins.
func (s *Server) SetFaults(f ...Fault) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = s.faults[:0]
	for _, x := range f {
		s.faults = append(s.faults, &activeFault{Fault: x})
	}
}

// ClearFaults removes every per-endpoint fault (FaultRate stays).
func (s *Server) ClearFaults() { s.SetFaults() }

// SetFaultRate changes the fraction of /api/ requests answered with a random 500/503/418.
func (s *Server) SetFaultRate(rate float64) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.opts.FaultRate = rate
}

// SetLatency changes the delay added to every /api/ request: fixed plus up to jitter.
func (s *Server) SetLatency(fixed, jitter time.Duration) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.latency, s.jitter = fixed, jitter
}

// pick decides the delay and the fault (if any) for one request.
func (s *Server) pick(r *http.Request) (time.Duration, *Fault) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	delay := s.latency
	if s.jitter > 0 {
		delay += time.Duration(s.faultRand.Int64N(int64(s.jitter)))
	}
	for _, f := range s.faults {
		if f.Count > 0 && f.fired >= f.Count || f.onPush() || !f.matches(r) {
			continue
		}
		if f.Rate > 0 && f.Rate < 1 && s.faultRand.Float64() >= f.Rate {
			continue
		}
		f.fired++
		out := f.Fault
		return delay, &out
	}
	if s.opts.FaultRate > 0 && s.faultRand.Float64() < s.opts.FaultRate {
		return delay, &Fault{Kind: "status", Status: []int{500, 503, 418}[s.faultRand.IntN(3)]}
	}
	return delay, nil
}

// firePush finds the first push fault of kind ok that matches resource p ("" for any) and fires.
func (s *Server) firePush(p string, ok func(kind string) bool) *Fault {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	for _, f := range s.faults {
		if !f.onPush() || !ok(f.Kind) || f.Count > 0 && f.fired >= f.Count || p != "" && !f.matchPath(p) {
			continue
		}
		if f.Rate > 0 && f.Rate < 1 && s.faultRand.Float64() >= f.Rate {
			continue
		}
		f.fired++
		out := f.Fault
		return &out
	}
	return nil
}

// pushRefused decides whether an upgrade of /ws/ is refused (kind "ws_refuse").
func (s *Server) pushRefused() bool {
	return s.firePush("", func(k string) bool { return k == kindPushRefuse }) != nil
}

// pickPush decides the fault of one data frame of resource res: its kind ("" for none) and,
// for "ws_delay", the delay.
func (s *Server) pickPush(res string) (string, time.Duration) {
	f := s.firePush(res, func(k string) bool { return k != kindPushRefuse })
	if f == nil {
		return "", 0
	}
	return f.Kind, f.Latency
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var faultMessages = map[int]text{
	500: txt("Internal server error.", "Внутренняя ошибка сервера."),
	502: txt("Bad gateway.", "Ошибка шлюза."),
	503: txt("Service is temporarily unavailable.", "Сервис временно недоступен."),
	418: txt("The controller is being updated, try again later.", "Контроллер обновляется, повторите попытку позже."),
}

const proxyErrorPage = `<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx</center>
</body>
</html>
`

// statusWriter logs the request when the header is written, so the log already holds a
// request when its client sees the answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	logged bool
	log    func(status int)
	lang   lang // of the request, for error texts
}

func (w *statusWriter) language() lang { return w.lang }

func (w *statusWriter) done(status int) {
	if !w.logged {
		w.logged = true
		w.status = status
		w.log(status)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.done(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.logged {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// api wraps the /api/ handler with the request log, the in-flight gauge, latency and faults.
func (s *Server) api(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		cur := s.inFlight.Add(1)
		for {
			m := s.inFlightMax.Load()
			if cur <= m || s.inFlightMax.CompareAndSwap(m, cur) {
				break
			}
		}
		defer s.inFlight.Add(-1)

		var logged string
		if r.Method == http.MethodPost || r.Method == http.MethodPut {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(b))
			logged = string(b[:min(len(b), 1024)])
		}
		sw := &statusWriter{ResponseWriter: w, lang: reqLang(r), log: func(status int) {
			s.record(Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: status,
				Start: start, Duration: time.Since(start), Body: logged})
		}}
		defer sw.done(0) // a request that never answered (client gone, reset) is logged with status 0

		delay, f := s.pick(r)
		if !sleepCtx(r.Context(), delay) {
			return
		}
		if f == nil {
			next.ServeHTTP(sw, r)
			return
		}
		s.applyFault(sw, r, f, next)
	})
}

func (s *Server) applyFault(w *statusWriter, r *http.Request, f *Fault, next http.Handler) {
	switch f.Kind {
	case "latency":
		if sleepCtx(r.Context(), f.Latency) {
			next.ServeHTTP(w, r)
		}
	case "html":
		st := f.Status
		if st == 0 {
			st = http.StatusBadGateway
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(st)
		_, _ = io.WriteString(w, proxyErrorPage)
	case "truncated":
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		b := rec.Body.Bytes()
		w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(b[:len(b)/2])
	case "reset":
		hj, ok := w.ResponseWriter.(http.Hijacker)
		if !ok {
			writeError(w, errDetail(500, "500", txt("Connection reset not supported.", "")))
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return
		}
		w.done(0)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, as a crashing proxy does
		}
		_ = conn.Close()
	case "wrong_types":
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var v any
		d := json.NewDecoder(rec.Body)
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			writeJSONBytes(w, rec.Code, rec.Body.Bytes())
			return
		}
		writeJSON(w, rec.Code, wrongTypes(v, true))
	default: // "status"
		st := f.Status
		if st == 0 {
			st = http.StatusInternalServerError
		}
		msg, ok := faultMessages[st]
		if !ok {
			msg = txt(http.StatusText(st), "")
		}
		writeError(w, errDetail(st, strconv.Itoa(st), msg))
	}
}

// wrongTypes turns numbers into objects, booleans into strings and count into a string:
// what a broken proxy or an incompatible platform version might send.
func wrongTypes(v any, top bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if top && k == "count" {
				x[k] = wrongString(e)
				continue
			}
			x[k] = wrongTypes(e, false)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = wrongTypes(e, false)
		}
		return x
	case json.Number:
		return map[string]any{"value": x}
	case bool:
		return strconv.FormatBool(x)
	}
	return v
}

func wrongString(v any) any {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	return v
}

// Request is one /api/ request served, for assertions on client behaviour.
type Request struct {
	Method   string        `json:"method"`
	Path     string        `json:"path"`
	Query    string        `json:"query"`
	Status   int           `json:"status"` // 0 when the connection was reset
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	Body     string        `json:"body,omitempty"` // first 1 KiB, for POST/PUT
}

func (s *Server) record(r Request) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if len(s.log) < requestLogSize {
		s.log = append(s.log, r)
		return
	}
	s.log[s.logNext] = r
	s.logNext = (s.logNext + 1) % requestLogSize
	s.logFull = true
}

// Requests returns the log of /api/ requests served, oldest first (the last 200,000).
func (s *Server) Requests() []Request {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	out := make([]Request, 0, len(s.log))
	if s.logFull {
		out = append(out, s.log[s.logNext:]...)
		return append(out, s.log[:s.logNext]...)
	}
	return append(out, s.log...)
}

// ResetRequests clears the request log and the in-flight maximum.
func (s *Server) ResetRequests() {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.log, s.logNext, s.logFull = nil, 0, false
	s.inFlightMax.Store(s.inFlight.Load())
}

// InFlightMax is the largest number of concurrent /api/ requests since the last ResetRequests.
func (s *Server) InFlightMax() int { return int(s.inFlightMax.Load()) }
