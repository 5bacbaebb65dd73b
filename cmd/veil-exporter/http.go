package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/forwarder"
)

func (d *daemon) handler(telemetryPath string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(telemetryPath, promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{
		// One inconsistent family must not cost the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promLogger{d},
	}))
	mux.HandleFunc("/-/healthy", d.serveHealthy)
	mux.HandleFunc("/-/ready", d.serveReady)
	mux.HandleFunc("/-/reload", d.serveReload)
	mux.HandleFunc("/{$}", d.serveStatus)
	return mux
}

type promLogger struct{ d *daemon }

func (l promLogger) Println(v ...any) {
	level.Error(l.d.logger).Log("msg", "error gathering metrics", "err", fmt.Sprint(v...))
}

// serveHealthy says whether every inventory loop is making progress.
func (d *daemon) serveHealthy(w http.ResponseWriter, r *http.Request) {
	d.mu.RLock()
	ctrls, cfg := d.controllers, d.cfg
	d.mu.RUnlock()
	// A loop that has not attempted a refresh in three intervals plus a request timeout is stuck.
	for _, ct := range ctrls {
		st := ct.inventory.Status()
		limit := 3*cfg.Collect.Interval + ct.cfg.Timeout
		if !st.LastAttempt.IsZero() && time.Since(st.LastAttempt) > limit {
			http.Error(w, fmt.Sprintf("controller %s: no inventory refresh for %s", ct.cfg.Name, time.Since(st.LastAttempt).Round(time.Second)), http.StatusServiceUnavailable)
			return
		}
		if st.LastAttempt.IsZero() && time.Since(d.started) > limit {
			http.Error(w, fmt.Sprintf("controller %s: inventory never refreshed", ct.cfg.Name), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "Healthy")
}

// serveReady: every first refresh done, and NATS connected when forwarding.
func (d *daemon) serveReady(w http.ResponseWriter, r *http.Request) {
	d.mu.RLock()
	ctrls, conn, cfg := d.controllers, d.conn, d.cfg
	d.mu.RUnlock()
	for _, ct := range ctrls {
		if !ct.inventory.Ready() {
			http.Error(w, fmt.Sprintf("controller %s: first inventory refresh not done", ct.cfg.Name), http.StatusServiceUnavailable)
			return
		}
	}
	if cfg != nil && cfg.Events.Enabled && (conn == nil || !conn.Connected()) {
		http.Error(w, "NATS not connected", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "Ready")
}

func (d *daemon) serveReload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST to reload the configuration", http.StatusMethodNotAllowed)
		return
	}
	if err := d.reload(); err != nil {
		http.Error(w, "reload refused, the previous configuration keeps running: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "Reloaded")
}

// statusData is the status page; it holds no secret (URLs are redacted, tokens never read).
type statusData struct {
	Version         string                `json:"version"`
	Started         time.Time             `json:"started"`
	ConfigFile      string                `json:"config_file"`
	LastReload      time.Time             `json:"last_reload"`
	LastReloadError string                `json:"last_reload_error,omitempty"`
	NATS            *forwarder.ConnStatus `json:"nats,omitempty"`
	Controllers     []controllerStatus    `json:"controllers"`
}

type controllerStatus struct {
	Name      string                    `json:"name"`
	URL       string                    `json:"url"`
	Inventory collector.InventoryStatus `json:"inventory"`
	Guest     *collector.GuestStatus    `json:"guest,omitempty"`
	Events    *forwarder.Status         `json:"events,omitempty"`
}

func (d *daemon) status() statusData {
	d.mu.RLock()
	defer d.mu.RUnlock()
	s := statusData{Version: d.version, Started: d.started, ConfigFile: d.configFile, LastReload: d.lastReload, LastReloadError: d.reloadError}
	if d.conn != nil {
		ns := d.conn.Status()
		s.NATS = &ns
	}
	for _, ct := range d.controllers {
		cs := controllerStatus{Name: ct.cfg.Name, URL: redact(ct.cfg.URL), Inventory: ct.inventory.Status()}
		if ct.guest != nil {
			gs := ct.guest.Status()
			cs.Guest = &gs
		}
		if ct.forwarder != nil {
			fs := ct.forwarder.Status()
			cs.Events = &fs
		}
		s.Controllers = append(s.Controllers, cs)
	}
	return s
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(invalid URL)"
	}
	return p.Redacted()
}

func (d *daemon) serveStatus(w http.ResponseWriter, r *http.Request) {
	s := d.status()
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := statusTemplate.Execute(w, s); err != nil {
		level.Error(d.logger).Log("msg", "couldn't render the status page", "err", err)
	}
}

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>veil-exporter</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}.bad{color:#b00}.ok{color:#070}</style>
</head><body>
<h1>veil-exporter</h1>
<p>Version {{.Version}}, started {{ago .Started}}. Config <code>{{.ConfigFile}}</code>, loaded {{ago .LastReload}}.
{{if .LastReloadError}}<br><span class="bad">Last reload refused: {{.LastReloadError}}</span>{{end}}</p>
<p><a href="metrics">Metrics</a> · <a href="?format=json">JSON</a> · <a href="-/healthy">Health</a> · <a href="-/ready">Readiness</a></p>
{{with .NATS}}<h2>NATS</h2><p>{{.URL}}{{if .Embedded}} (embedded){{end}}: {{if .Connected}}<span class="ok">connected</span>{{else}}<span class="bad">not connected</span>{{end}}{{if .LastError}} — {{.LastError}}{{end}}</p>{{end}}
{{range .Controllers}}
<h2>Controller {{.Name}}</h2>
<p>{{.URL}} — {{if .Inventory.Up}}<span class="ok">up</span>{{else if .Inventory.Ready}}<span class="bad">down</span>{{else}}waiting for the first refresh{{end}}</p>
{{if .Inventory.LastError}}<p class="bad">{{.Inventory.LastError}}</p>{{end}}
<table>
<tr><th>Last refresh</th><td>{{ago .Inventory.LastAttempt}}, took {{dur .Inventory.LastDuration}}</td></tr>
<tr><th>Inventory</th><td>{{.Inventory.Nodes}} nodes, {{.Inventory.Clusters}} clusters, {{.Inventory.Datapools}} datapools, {{.Inventory.Domains}} VMs exported of {{.Inventory.DomainsTotal}}</td></tr>
<tr><th>Tasks</th><td>{{range $s, $n := .Inventory.Tasks}}{{$s}}: {{$n}} {{end}}</td></tr>
</table>
<table><tr><th>Collection</th><th>Success</th><th>Duration</th><th>Last success</th><th>Error</th></tr>
{{range .Inventory.Collections}}<tr><td>{{.Name}}</td><td>{{if .Success}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}</td><td>{{dur .Duration}}</td><td>{{ago .LastSuccess}}</td><td>{{.Error}}</td></tr>
{{end}}</table>
{{with .Guest}}<p>Guest checks: {{.Checked}} of {{.Eligible}} eligible VMs checked; last sweep took {{dur .SweepDuration}}.{{if .LastError}} Last error: {{.LastError}}{{end}}</p>{{end}}
{{with .Events}}<p>Events: position {{if .Position.IsZero}}none yet{{else}}{{.Position.Format "2006-01-02T15:04:05.000000Z07:00"}}{{end}}, order {{.Order}}, backlog {{.Backlog}}, {{.Published}} published, last {{ago .LastPublished}}; {{.Duplicates}} duplicates dropped, {{.Gaps}} gaps.{{if .Stopped}} <span class="bad">Stopped: another instance owns the position.</span>{{end}}{{if .LastError}} <span class="bad">{{.LastError}}</span>{{end}}</p>{{end}}
{{end}}
</body></html>
`))
