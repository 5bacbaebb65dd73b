package veiltest

// This file holds the simulator's one route table: every endpoint of the API and of the control
// API as an http.ServeMux method pattern with a line of documentation. The same table serves the
// requests and renders /api/docs/, so the page cannot list what is not served or miss what is.

import (
	"html/template"
	"net/http"
	"strings"
)

// route is one endpoint. API routes (under /api/) need the token unless public; control routes
// (under /_sim/) never do.
type route struct {
	pattern string // "METHOD /path/{id}/{$}"
	doc     string
	public  bool
	h       func(s *Server, w http.ResponseWriter, r *http.Request)
}

// withID adapts a handler of one object to a route whose pattern names {id}.
func withID(f func(s *Server, w http.ResponseWriter, r *http.Request, id string)) func(*Server, http.ResponseWriter, *http.Request) {
	return func(s *Server, w http.ResponseWriter, r *http.Request) { f(s, w, r, r.PathValue("id")) }
}

var apiRoutes = []route{
	{"GET /api/docs/{$}", "this page (HTML, no token)", true, (*Server).docs},
	{"GET /api/controllers/base-version/{$}", "the controller's platform version: {version}; 404 on a controller older than the endpoint", false, (*Server).baseVersion},
	{"GET /api/nodes/{$}", "nodes; filters cluster, ordering, fields", false, (*Server).listNodes},
	{"GET /api/nodes/{id}/{$}", "one node", false, withID((*Server).getNode)},
	{"PUT /api/nodes/{id}/ballooning/{$}", "memory ballooning on or off", false, withID((*Server).ballooning)},
	{"GET /api/clusters/{$}", "clusters", false, (*Server).listClusters},
	{"GET /api/clusters/{id}/{$}", "one cluster", false, withID((*Server).getCluster)},
	{"GET /api/data-pools/{$}", "datapools; filters node, cluster", false, (*Server).listPools},
	{"GET /api/data-pools/{id}/{$}", "one datapool", false, withID((*Server).getPool)},
	{"GET /api/domains/{$}", "virtual machines; filters node, cluster, datapool, resource_pool, template, status, power_state, ids, name", false, (*Server).listDomains},
	{"POST /api/domains/backup/{$}", "back up VMs (task)", false, (*Server).backup},
	{"GET /api/domains/{id}/{$}", "one virtual machine", false, withID((*Server).getDomain)},
	{"POST /api/domains/{id}/start/{$}", "start (task)", false, withID((*Server).start)},
	{"POST /api/domains/{id}/shutdown/{$}", "shut down (task)", false, withID((*Server).shutdown)},
	{"POST /api/domains/{id}/clone/{$}", "clone; domains_ids, count (task)", false, withID((*Server).clone)},
	{"POST /api/domains/{id}/remove/{$}", "remove (task)", false, withID((*Server).remove)},
	{"POST /api/domains/{id}/ssh-inject/{$}", "inject an SSH key through the guest agent (task)", false, withID((*Server).sshInject)},
	{"PUT /api/domains/{id}/template/{$}", "make or unmake a template", false, withID((*Server).setTemplate)},
	{"GET /api/domains/{id}/available-guest-cmds/{$}", "guest-agent commands the platform allows", false, withID((*Server).availableGuestCmds)},
	{"POST /api/domains/{id}/guest-command/{$}", "run a guest-agent command", false, withID((*Server).guestCommand)},
	{"GET /api/vdisks/{$}", "virtual disks (sizes in GB); filters datapool, domain", false, (*Server).listVdisks},
	{"GET /api/vdisks/{id}/{$}", "one virtual disk with its snapshots, bus and cache", false, withID((*Server).getVdisk)},
	{"GET /api/vmachine-infs/{$}", "network interfaces of the VMs; filter domain", false, (*Server).listVMachineInfs},
	{"GET /api/vmachine-infs/{id}/{$}", "one network interface with its link_state and node_info", false, withID((*Server).getVMachineInf)},
	{"GET /api/tasks/{$}", "tasks; filters parent, status", false, (*Server).listTasks},
	{"GET /api/tasks/{id}/{$}", "one task with its events", false, withID((*Server).getTask)},
	{"GET /api/tasks/{id}/response/{$}", "what a finished task produced", false, withID((*Server).taskResponse)},
	{"GET /api/events/{$}", "the event journal; filters type, user, task", false, (*Server).listEvents},
	{"GET /api/events/{id}/{$}", "one event", false, withID((*Server).getEvent)},
}

// routes builds the simulator's handler: /api/ through the fault injection and the request log,
// /_sim/ directly, the push channel /ws/ (push.go), anything else a 404 error body.
func (s *Server) routes() http.Handler {
	s.table = http.NewServeMux()
	s.apiRoutes, s.controlRoutes = apiRoutes, controlRoutes // docs reads them here: no init cycle
	// An older controller has no device collections: their URLs are unknown (404 before the
	// token is looked at).
	if s.opts.NoDevices {
		s.apiRoutes = nil
		for _, rt := range apiRoutes {
			if !strings.Contains(rt.pattern, " /api/vdisks/") && !strings.Contains(rt.pattern, " /api/vmachine-infs/") {
				s.apiRoutes = append(s.apiRoutes, rt)
			}
		}
	}
	for _, rt := range append(append([]route{}, s.apiRoutes...), controlRoutes...) {
		s.table.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) { rt.h(s, w, r) })
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", s.api(http.HandlerFunc(s.serveAPI)))
	mux.HandleFunc("/_sim/", s.serveControl)
	mux.HandleFunc("GET /ws/{$}", s.serveWS)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errDetail(http.StatusNotFound, "50004", txt("URL is not found.", "URL не найден.")))
	})
	return mux
}

// match finds the route of r: its pattern, or "" with the methods the path allows (none: 404).
// Among the routes of every method that match the path, the most literal one decides, as the
// platform routes /api/domains/backup/ before /api/domains/{id}/: a GET there is a 405, not a
// VM named "backup".
func (s *Server) match(r *http.Request) (pattern string, allowed []string) {
	// The request's own method first: a route without wildcards is the most literal there is.
	if _, p := s.table.Handler(r); p != "" && !strings.Contains(strings.TrimSuffix(p, "{$}"), "{") {
		return p, nil
	}
	best, bestWild := "", -1
	byMethod := map[string]string{}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		q := r
		if m != r.Method {
			q = &http.Request{Method: m, URL: r.URL, Host: r.Host} // all the mux looks at
		}
		_, p := s.table.Handler(q)
		if p == "" {
			continue
		}
		_, path, _ := strings.Cut(p, " ")
		byMethod[m] = path
		if w := strings.Count(path, "{") - strings.Count(path, "{$}"); bestWild < 0 || w < bestWild {
			best, bestWild = path, w
		}
	}
	if path, ok := byMethod[r.Method]; ok && path == best {
		return r.Method + " " + path, nil
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if byMethod[m] == best && best != "" {
			allowed = append(allowed, m)
		}
	}
	return "", allowed
}

func (s *Server) isPublic(pattern string) bool {
	for _, rt := range s.apiRoutes {
		if rt.pattern == pattern {
			return rt.public
		}
	}
	return false
}

var docsPage = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:70em}code{background:#f3f3f3;padding:0 .2em}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:left;vertical-align:top}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>Every request to <code>/api/</code> but this page needs <code>Authorization: jwt &lt;token&gt;</code>.
Lists: <code>limit</code> (0..100, larger values are clamped), <code>offset</code>, <code>ordering</code>, <code>fields</code>;
an unknown filter value gives an empty list. State-changing operations answer 200 and the resource once their task ended,
or with <code>?async=1</code> 202 and <code>{_task, _entity}</code> ({{if eq .Profile "alternative"}}this profile: <code>entity</code>{{else}}profile alternative: <code>entity</code>{{end}}).
<code>Accept-Language: ru</code> gives Russian texts. Events are listed {{.Order}} by default.</p>
<h2>Push channel</h2>
<p>A WebSocket at <code>/ws/?token=&lt;token&gt;</code> (without <code>jwt </code>). Send <code>add /domains/</code>
(or <code>/nodes/</code>, <code>/clusters/</code>, <code>/data-pools/</code>, <code>/resource_pools/</code>, <code>/tasks/</code>;
<code>delete &lt;resource&gt;</code> unsubscribes): each change of an object of the resource then comes as
<code>{"msg_type": "data", "resource", "event": "CREATED"|"UPDATED"|"DELETED", "id", "object"}</code>, the object as its
collection lists it. A refused token gets <code>{"msg_type": "text_msg", "text": "token error"}</code> and the socket closes.</p>
<h2>API</h2>
<table><tr><th>Endpoint</th><th>What</th></tr>
{{range .API}}<tr><td><code>{{.Pattern}}</code></td><td>{{.Doc}}</td></tr>
{{end}}</table>
<h2>Control API (scenarios and faults, no token)</h2>
<table><tr><th>Endpoint</th><th>What</th></tr>
{{range .Control}}<tr><td><code>{{.Pattern}}</code></td><td>{{.Doc}}</td></tr>
{{end}}</table>
</body></html>
`))

type docRow struct{ Pattern, Doc string }

func docRows(rs []route) []docRow {
	out := make([]docRow, 0, len(rs))
	for _, rt := range rs {
		out = append(out, docRow{strings.TrimSuffix(rt.pattern, "{$}"), rt.doc})
	}
	return out
}

// docs renders the route table.
func (s *Server) docs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = docsPage.Execute(w, map[string]any{
		"Title": "VeiL platform API (veiltest simulator)", "Profile": s.opts.Profile, "Order": s.opts.EventsOrder,
		"API": docRows(s.apiRoutes), "Control": docRows(s.controlRoutes),
	})
}
