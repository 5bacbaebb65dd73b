// /sd/domains: Prometheus HTTP service discovery of the guests of the controllers this exporter
// runs (with replicas, the ones this replica runs). One target group per VM that is on and has
// an address of the asked family (?family=ipv4, the default: the primary IPv4 address the guest
// agent reports to the platform; ipv6: a global IPv6 address from guest-network-get-interfaces;
// any: IPv4, else IPv6), targets <address>:<port> (one per port tag "port:N" of the VM, else
// ?port=), labels __meta_veil_*; ?tag=, ?os_id= and ?node= filter on the server, since Prometheus'
// http_sd client refuses gzip and 50,000 VMs make 12 MB. It is answered from the cached inventory
// and the guest checker's results: never from the controller.

package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/veil-exporter/veil-exporter/collector"
)

// sdSource is what one controller contributes to /sd/domains.
type sdSource struct {
	controller string
	targets    []collector.GuestTarget // sorted by VM id
	osIDs      map[string]string       // nil without guest checks
	ipv6       map[string]string       // from the guest checks; nil for ?family=ipv4 or without them
}

// sdQuery is what a request asks of /sd/domains.
type sdQuery struct {
	port   string
	family string   // ipv4 (default), ipv6 or any
	tags   []string // ",name,": the VM has every one of these tags
	osIDs  []string // the VM's os_id is one of these (nil: no filter)
	nodes  []string // the VM's node id or name is one of these (nil: no filter)
}

// Address families of ?family=.
const (
	familyIPv4 = "ipv4"
	familyIPv6 = "ipv6"
	familyAny  = "any"
)

// serveSD answers Prometheus' http_sd: always 200 with a JSON list when it can answer, since
// Prometheus keeps its previous targets on any error. Hence a controller this exporter does not
// run (a typo, removed by a reload, or run by another replica) gives [], not 404: an error would
// keep a removed controller's guests as targets forever. 400 for a bad port; 503 while a
// controller's first inventory refresh is not done (Prometheus then keeps its last list rather
// than dropping every target of a restarted exporter).
func (d *Daemon) serveSD(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d.mu.RLock()
	ctrls, cfg := d.controllers, d.cfg
	d.mu.RUnlock()
	port := 9100
	if cfg != nil {
		port = cfg.SD.Port
	}
	if p := q.Get("port"); p != "" || q.Has("port") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			http.Error(w, fmt.Sprintf("port %q is not a port number (1-65535)", p), http.StatusBadRequest)
			return
		}
		port = n
	}
	sq := sdQuery{port: strconv.Itoa(port), family: familyIPv4, osIDs: q["os_id"], nodes: q["node"]}
	if q.Has("family") {
		switch f := q.Get("family"); f {
		case familyIPv4, familyIPv6, familyAny:
			sq.family = f
		default:
			http.Error(w, fmt.Sprintf("family %q is not ipv4, ipv6 or any", f), http.StatusBadRequest)
			return
		}
	}
	for _, t := range q["tag"] {
		sq.tags = append(sq.tags, ","+t+",")
	}
	only, filter := q.Get("controller"), q.Has("controller")
	var srcs []sdSource
	for _, ct := range ctrls {
		if filter && ct.cfg.Name != only {
			continue
		}
		if !ct.inventory.Ready() {
			http.Error(w, fmt.Sprintf("controller %s: first inventory refresh not done", ct.cfg.Name), http.StatusServiceUnavailable)
			return
		}
		s := sdSource{controller: ct.cfg.Name, targets: ct.inventory.GuestTargets()}
		for _, p := range ct.parts {
			if g, ok := p.(guestPart); ok {
				s.osIDs = g.OSIDs()
				if sq.family != familyIPv4 {
					s.ipv6 = g.GuestIPv6()
				}
			}
		}
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, func(a, b sdSource) int { return strings.Compare(a.controller, b.controller) })
	n := 0
	for _, s := range srcs {
		n += len(s.targets)
	}
	if len(sq.tags) > 0 || sq.osIDs != nil || sq.nodes != nil {
		n /= 8 // a guess: filters select a part
	}
	body := appendSD(make([]byte, 0, 2+n*sdGroupSize), srcs, &sq)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// sdGroupSize is room enough for most target groups: one buffer, no regrowth.
const sdGroupSize = 512

// appendSD writes the target groups of srcs that q selects, in their order, as http_sd JSON.
// Written by hand: at 50,000 VMs encoding/json with a map per group costs ten times as much.
func appendSD(b []byte, srcs []sdSource, q *sdQuery) []byte {
	b = append(b, '[')
	first := true
	ports := []string{q.port}
	for _, s := range srcs {
		for i := range s.targets {
			t := &s.targets[i]
			dom := t.Domain
			if !q.selects(t, s.osIDs) {
				continue
			}
			host, family := t.IPv4, familyIPv4
			if q.family != familyIPv4 && (q.family == familyIPv6 || host == "") {
				host, family = t.IPv6, familyIPv6
				if v6, ok := s.ipv6[dom.ID]; ok {
					host = v6 // the guest's interfaces before guest_utils
				}
			}
			if host == "" {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"targets":[`...)
			tp := ports
			if t.Ports != nil {
				tp = t.Ports // port tags override ?port=
			}
			for j, p := range tp {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendTarget(b, host, p)
			}
			b = append(b, `],"labels":{`...)
			b = appendLabel(b, "__meta_veil_controller", s.controller, true)
			b = appendLabel(b, "__meta_veil_domain_id", dom.ID, false)
			b = appendLabel(b, "__meta_veil_domain", dom.VerboseName, false)
			b = appendLabel(b, "__meta_veil_node_id", dom.Node.ID, false)
			b = appendLabel(b, "__meta_veil_node", t.Node, false)
			b = appendLabel(b, "__meta_veil_power_state", "on", false) // only VMs that are on are listed
			if h := dom.GuestUtils.Hostname; h != "" {
				b = appendLabel(b, "__meta_veil_guest_hostname", h, false)
			}
			if t.Tags != "" {
				b = appendLabel(b, "__meta_veil_tags", t.Tags, false)
			}
			if osID, ok := s.osIDs[dom.ID]; ok {
				b = appendLabel(b, "__meta_veil_os_id", osID, false)
			}
			if q.family == familyAny {
				b = appendLabel(b, "__meta_veil_ip_family", family, false)
			}
			b = append(b, "}}"...)
		}
	}
	return append(b, ']')
}

// selects tells whether the target passes the request's filters: every ?tag=, one of the
// ?os_id= (a VM whose OS the guest checker does not know has none) and one of the ?node=
// (id or name).
func (q *sdQuery) selects(t *collector.GuestTarget, osIDs map[string]string) bool {
	for _, tag := range q.tags {
		if !strings.Contains(t.Tags, tag) {
			return false
		}
	}
	if q.nodes != nil && !slices.Contains(q.nodes, t.Domain.Node.ID) && !slices.Contains(q.nodes, t.Node) {
		return false
	}
	if q.osIDs != nil {
		osID, ok := osIDs[t.Domain.ID]
		if !ok || !slices.Contains(q.osIDs, osID) {
			return false
		}
	}
	return true
}

// appendTarget writes "host:port" as net.JoinHostPort does, without allocating.
func appendTarget(b []byte, host, port string) []byte {
	if strings.IndexByte(host, ':') >= 0 {
		return appendJSONString(b, net.JoinHostPort(host, port))
	}
	b = appendJSONString(b, host)
	b = b[:len(b)-1] // reopen the quoted host
	b = append(b, ':')
	b = append(b, port...)
	return append(b, '"')
}

func appendLabel(b []byte, name, value string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return appendJSONString(b, value)
}

// appendJSONString quotes s; strings that need escaping (rare in names and addresses) go
// through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
