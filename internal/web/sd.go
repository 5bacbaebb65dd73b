// /sd/domains: Prometheus HTTP service discovery of the guests of the controllers this exporter
// runs (with replicas, the ones this replica runs). One target group per VM that is on and has
// an address of the asked family (?family=ipv4, the default: the primary IPv4 address the guest
// agent reports to the platform; ipv6: a global IPv6 address from guest-network-get-interfaces;
// any: IPv4, else IPv6), targets <address>:<port> (one per port tag "port:N" of the VM, else
// ?port=), labels __meta_veil_*; ?tag=, ?os_id= and ?node= filter on the server, since Prometheus'
// http_sd client refuses gzip and 50,000 VMs make 12 MB. It is answered from the cached inventory
// and the guest checker's results: never from the controller.

package web

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/collector"
)

// What one /sd/domains request may ask: its parameters are matched against every VM, so their
// number and length bound its cost (VMs × values). Beyond: 400.
const (
	sdMaxValues   = 64  // values of all parameters together
	sdMaxValueLen = 256 // bytes of one value (or key)
)

// sdMaxInFlight /sd/domains answers are computed at once (each walks every VM); one more waits
// up to sdQueueWait for a place, then gets 503 (Prometheus keeps its targets and asks again at
// its next refresh).
const (
	sdMaxInFlight = 4
	sdQueueWait   = 2 * time.Second
)

// sdGuard holds what /sd/domains needs across requests: its places, its counters, and which
// refused addresses were already logged.
type sdGuard struct {
	places          chan struct{}
	requestsRefused *prometheus.CounterVec // by reason
	targetsRefused  *prometheus.CounterVec // by reason

	mu     sync.Mutex
	logged map[string]string // VM id (with controller) → the refused address last logged
}

// sdLoggedMax bounds sdGuard.logged: beyond, it starts again (a VM may then be logged again).
const sdLoggedMax = 100_000

// Reasons of veil_sd_requests_refused_total and veil_sd_targets_refused_total.
const (
	sdTooManyValues = "too_many_parameters"
	sdValueTooLong  = "parameter_too_long"
	sdBusy          = "busy"
	sdNotAllowed    = "address_not_allowed"
	sdNotAnAddress  = "not_an_address"
)

// newSDGuard makes the guard of /sd/domains with its counters registered in reg (nil: none);
// counters already there are shared.
func newSDGuard(reg *prometheus.Registry) *sdGuard {
	g := &sdGuard{
		places: make(chan struct{}, sdMaxInFlight),
		requestsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "veil_sd_requests_refused_total",
			Help: "Requests to /sd/domains refused: too_many_parameters or parameter_too_long (400), busy (503: too many at once).",
		}, []string{"reason"}),
		targetsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "veil_sd_targets_refused_total",
			Help: "Targets left out of /sd/domains answers (counted per answer): address_not_allowed (outside sd.allowed_networks; without it loopback, link-local, multicast or unspecified), not_an_address.",
		}, []string{"reason"}),
		logged: map[string]string{},
	}
	for _, r := range []string{sdTooManyValues, sdValueTooLong, sdBusy} {
		g.requestsRefused.WithLabelValues(r)
	}
	for _, r := range []string{sdNotAllowed, sdNotAnAddress} {
		g.targetsRefused.WithLabelValues(r)
	}
	if reg != nil {
		g.requestsRefused = registerOnce(reg, g.requestsRefused)
		g.targetsRefused = registerOnce(reg, g.targetsRefused)
	}
	return g
}

// registerOnce registers c in reg, or returns what reg already holds in its place.
func registerOnce[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// refused counts a target left out and logs it once per VM and address.
func (g *sdGuard) refused(logger log.Logger, controller string, t *collector.GuestTarget, host, reason string) {
	g.targetsRefused.WithLabelValues(reason).Inc()
	key := controller + "/" + t.Domain.ID
	g.mu.Lock()
	seen := g.logged[key] == host
	if !seen {
		if len(g.logged) >= sdLoggedMax {
			clear(g.logged)
		}
		g.logged[key] = host
	}
	g.mu.Unlock()
	if !seen {
		level.Warn(logger).Log("msg", "guest left out of /sd/domains: its address is not allowed (sd.allowed_networks)", "controller", controller,
			"domain_id", t.Domain.ID, "domain", capText(t.Domain.VerboseName, 128), "address", capText(host, 128), "reason", reason)
	}
}

// checkSDQuery says why a query is refused (400), or "".
func checkSDQuery(q map[string][]string) (reason, why string) {
	n := 0
	for k, vs := range q {
		n += len(vs)
		if len(k) > sdMaxValueLen {
			return sdValueTooLong, fmt.Sprintf("a parameter name is longer than %d bytes", sdMaxValueLen)
		}
		for _, v := range vs {
			if len(v) > sdMaxValueLen {
				return sdValueTooLong, fmt.Sprintf("parameter %s: a value is longer than %d bytes", capText(k, 64), sdMaxValueLen)
			}
		}
	}
	if n > sdMaxValues {
		return sdTooManyValues, fmt.Sprintf("%d parameter values, at most %d", n, sdMaxValues)
	}
	return "", ""
}

// allowedAddress says whether host may be handed to Prometheus as a target's address, or why
// not: it must be an IP address (a name would be resolved by Prometheus), in one of nets, or
// with no nets not one that is never a guest's (loopback: the Prometheus host itself;
// link-local: cloud metadata services; multicast; unspecified).
func allowedAddress(host string, nets []netip.Prefix) (ok bool, reason string) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false, sdNotAnAddress
	}
	a = a.Unmap()
	if len(nets) == 0 {
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
			return false, sdNotAllowed
		}
		return true, ""
	}
	a = a.WithZone("")
	for _, n := range nets {
		if n.Contains(a) {
			return true, ""
		}
	}
	return false, sdNotAllowed
}

// sdSource is what one controller contributes to /sd/domains.
type sdSource struct {
	controller string
	targets    []collector.GuestTarget // sorted by VM id
	osIDs      map[string]string       // nil without guest checks
	ipv6       map[string]string       // from the guest checks; nil for ?family=ipv4 or without them
}

// sdQuery is what a request asks of /sd/domains.
type sdQuery struct {
	nets []netip.Prefix // sd.allowed_networks
	// refused is told of each target left out for its address (nil: nobody).
	refused func(controller string, t *collector.GuestTarget, host, reason string)

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
func (s *server) serveSD(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if reason, why := checkSDQuery(q); reason != "" {
		s.sd.requestsRefused.WithLabelValues(reason).Inc()
		http.Error(w, why, http.StatusBadRequest)
		return
	}
	body, code, msg := s.sdAnswer(r, q)
	if code != http.StatusOK {
		http.Error(w, msg, code)
		return
	}
	// Written without the place: a client that stops reading holds only its connection.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// sdAnswer computes the answer to a valid query under one of the sdMaxInFlight places: the
// body, or a status and message.
func (s *server) sdAnswer(r *http.Request, q map[string][]string) ([]byte, int, string) {
	t := time.NewTimer(sdQueueWait)
	defer t.Stop()
	select {
	case s.sd.places <- struct{}{}:
		defer func() { <-s.sd.places }()
	case <-t.C:
		s.sd.requestsRefused.WithLabelValues(sdBusy).Inc()
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("too many service discovery requests at once (%d), try again later", sdMaxInFlight)
	case <-r.Context().Done():
		return nil, http.StatusServiceUnavailable, "request cancelled"
	}
	get := func(k string) string {
		if vs := q[k]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	has := func(k string) bool { _, ok := q[k]; return ok }
	disc := s.src.Discovery()
	port, nets := disc.Port, disc.Networks
	if p := get("port"); p != "" || has("port") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, http.StatusBadRequest, fmt.Sprintf("port %q is not a port number (1-65535)", p)
		}
		port = n
	}
	sq := sdQuery{port: strconv.Itoa(port), family: familyIPv4, osIDs: q["os_id"], nodes: q["node"], nets: nets,
		refused: func(controller string, t *collector.GuestTarget, host, reason string) {
			s.sd.refused(s.logger, controller, t, host, reason)
		}}
	if has("family") {
		switch f := get("family"); f {
		case familyIPv4, familyIPv6, familyAny:
			sq.family = f
		default:
			return nil, http.StatusBadRequest, fmt.Sprintf("family %q is not ipv4, ipv6 or any", f)
		}
	}
	for _, t := range q["tag"] {
		sq.tags = append(sq.tags, ","+t+",")
	}
	only, filter := get("controller"), has("controller")
	var srcs []sdSource
	for _, c := range disc.Controllers {
		if filter && c.Name != only {
			continue
		}
		if !c.Targets.Ready() {
			return nil, http.StatusServiceUnavailable, fmt.Sprintf("controller %s: first inventory refresh not done", c.Name)
		}
		src := sdSource{controller: c.Name, targets: c.Targets.GuestTargets()}
		if c.Guests != nil {
			src.osIDs = c.Guests.OSIDs()
			if sq.family != familyIPv4 {
				src.ipv6 = c.Guests.GuestIPv6()
			}
		}
		srcs = append(srcs, src)
	}
	slices.SortFunc(srcs, func(a, b sdSource) int { return strings.Compare(a.controller, b.controller) })
	n := 0
	for _, src := range srcs {
		n += len(src.targets)
	}
	if len(sq.tags) > 0 || sq.osIDs != nil || sq.nodes != nil {
		n /= 8 // a guess: filters select a part
	}
	return appendSD(make([]byte, 0, 2+n*sdGroupSize), srcs, &sq), http.StatusOK, ""
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
			if ok, why := allowedAddress(host, q.nets); !ok {
				if q.refused != nil {
					q.refused(s.controller, t, host, why)
				}
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
