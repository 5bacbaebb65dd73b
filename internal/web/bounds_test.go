// What a client or a guest sends to the web endpoints is bounded: SD parameters, SD requests
// at once, addresses handed to Prometheus, status page texts.

package web

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/veil-exporter/veil-exporter/collector"
	"github.com/veil-exporter/veil-exporter/veil"
)

// TestSDQueryBounds: more parameter values than sdMaxValues, or one longer than
// sdMaxValueLen, is a 400 (counted), before any VM is looked at.
func TestSDQueryBounds(t *testing.T) {
	d, h := newServer(&fakeSource{})
	long := strings.Repeat("x", sdMaxValueLen+1)
	tests := []struct {
		name, query string
		wantCode    int
		reason      string
	}{
		{"a few filters", "tag=a&tag=b&node=n&os_id=debian&port=9100", http.StatusOK, ""},
		{"as many values as allowed", strings.Repeat("tag=a&", sdMaxValues-1) + "tag=a", http.StatusOK, ""},
		{"one value too many", strings.Repeat("tag=a&", sdMaxValues) + "tag=a", http.StatusBadRequest, sdTooManyValues},
		{"unknown parameters count too", strings.Repeat("x=1&", sdMaxValues) + "y=1", http.StatusBadRequest, sdTooManyValues},
		{"a long value", "tag=" + long, http.StatusBadRequest, sdValueTooLong},
		{"a long name", long + "=1", http.StatusBadRequest, sdValueTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before float64
			if tt.reason != "" {
				before = testutil.ToFloat64(d.sd.requestsRefused.WithLabelValues(tt.reason))
			}
			code, _, body := serveQuery(h, "/sd/domains", tt.query)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d: %.200s", code, tt.wantCode, body)
			}
			if tt.reason != "" {
				if got := testutil.ToFloat64(d.sd.requestsRefused.WithLabelValues(tt.reason)); got != before+1 {
					t.Errorf("veil_sd_requests_refused_total{reason=%q} = %v, want %v", tt.reason, got, before+1)
				}
			}
		})
	}
}

// TestSDBusy: with every place taken, one more SD request waits sdQueueWait and gets 503
// (counted), and a free place serves it.
func TestSDBusy(t *testing.T) {
	d, h := newServer(&fakeSource{})
	for range sdMaxInFlight {
		d.sd.places <- struct{}{}
	}
	if code, _, body := serveQuery(h, "/sd/domains", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("SD with every place taken = %d, want 503: %s", code, body)
	}
	if got := testutil.ToFloat64(d.sd.requestsRefused.WithLabelValues(sdBusy)); got != 1 {
		t.Errorf("veil_sd_requests_refused_total{reason=busy} = %v, want 1", got)
	}
	<-d.sd.places
	if code, _, body := serveQuery(h, "/sd/domains", ""); code != http.StatusOK {
		t.Fatalf("SD with a place free = %d: %s", code, body)
	}
}

// TestSDAllowedAddresses: a target's address is handed to Prometheus only when it is an IP
// address in sd.allowed_networks or, without them, not one that is never a guest's; each one
// left out is counted and logged once per VM and address.
func TestSDAllowedAddresses(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		host   string
		nets   []netip.Prefix
		ok     bool
		reason string
	}{
		{"10.1.2.3", nil, true, ""},
		{"203.0.113.9", nil, true, ""},
		{"2001:db8::1", nil, true, ""},
		{"127.0.0.1", nil, false, sdNotAllowed},
		{"::1", nil, false, sdNotAllowed},
		{"169.254.169.254", nil, false, sdNotAllowed},
		{"fe80::1%eth0", nil, false, sdNotAllowed},
		{"0.0.0.0", nil, false, sdNotAllowed},
		{"224.0.0.1", nil, false, sdNotAllowed},
		{"::ffff:127.0.0.1", nil, false, sdNotAllowed},
		{"metadata.internal", nil, false, sdNotAnAddress},
		{"10.9.9.9", nets, true, ""},
		{"::ffff:10.9.9.9", nets, true, ""},
		{"fd00::5", nets, true, ""},
		{"192.168.0.1", nets, false, sdNotAllowed},
		{"127.0.0.1", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true, ""}, // the operator's choice
	}
	for _, tt := range tests {
		if ok, why := allowedAddress(tt.host, tt.nets); ok != tt.ok || why != tt.reason {
			t.Errorf("allowedAddress(%q, %v) = %v %q, want %v %q", tt.host, tt.nets, ok, why, tt.ok, tt.reason)
		}
	}

	g := newSDGuard(nil)
	var logs strings.Builder
	logger := log.NewLogfmtLogger(&logs)
	a := &veil.Domain{ID: "id-a", VerboseName: "a", Node: veil.Ref{ID: "n1"}}
	b := &veil.Domain{ID: "id-b", VerboseName: "b", Node: veil.Ref{ID: "n1"}}
	c := &veil.Domain{ID: "id-c", VerboseName: "c", Node: veil.Ref{ID: "n1"}}
	srcs := []sdSource{{controller: "prod", targets: []collector.GuestTarget{
		{Domain: a, IPv4: "10.0.0.1"}, {Domain: b, IPv4: "169.254.169.254"}, {Domain: c, IPv4: "192.168.7.7"},
	}}}
	q := sdQuery{port: "9100", family: familyIPv4, nets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		refused: func(controller string, t *collector.GuestTarget, host, reason string) {
			g.refused(logger, controller, t, host, reason)
		}}
	for range 3 {
		got := decodeSD(t, string(appendSD(nil, srcs, &q)))
		if len(got) != 1 || got[0].Targets[0] != "10.0.0.1:9100" {
			t.Fatalf("answer %v, want only 10.0.0.1:9100", got)
		}
	}
	if got := testutil.ToFloat64(g.targetsRefused.WithLabelValues(sdNotAllowed)); got != 6 {
		t.Errorf("veil_sd_targets_refused_total{reason=address_not_allowed} = %v after 3 answers leaving 2 out, want 6", got)
	}
	if n := strings.Count(logs.String(), "left out of /sd/domains"); n != 2 || !strings.Contains(logs.String(), "domain_id=id-b") || !strings.Contains(logs.String(), "address=192.168.7.7") {
		t.Errorf("want one line per VM left out, got %d:\n%s", n, logs.String())
	}
}

// TestStatusTextsCapped: a text of any length (an error the controller sends, a problem's
// name) is shown cut to statusTextMax with an ellipsis, on the page and in its JSON, and the
// part's own status is left as it was.
func TestStatusTextsCapped(t *testing.T) {
	long := strings.Repeat("é", 2000) // two bytes a rune: the cut falls on a boundary
	shared := []problem{{Kind: "node", ID: "n1", Name: long, State: "FAILED"}}
	s := statusData{LastReloadError: long, Controllers: []controllerStatus{{Name: "c", Error: long, Problems: shared}}}
	capStrings(reflect.ValueOf(&s).Elem())
	for _, got := range []string{s.LastReloadError, s.Controllers[0].Error, s.Controllers[0].Problems[0].Name} {
		if len(got) > statusTextMax || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
			t.Errorf("capped text of %d bytes (valid UTF-8: %v), want at most %d ending in …", len(got), utf8.ValidString(got), statusTextMax)
		}
	}
	if shared[0].Name != long {
		t.Error("capping changed the problems slice it was given")
	}
	if capText("short", statusTextMax) != "short" {
		t.Error("a short text was changed")
	}

	_, h := newServer(&fakeSource{status: Status{LastReloadError: strings.Repeat("x", 100_000)}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 200 || rec.Body.Len() > 50_000 || !strings.Contains(rec.Body.String(), "x…") {
		t.Errorf("status page with a 100 kB reload error: %d, %d bytes", rec.Code, rec.Body.Len())
	}
}
