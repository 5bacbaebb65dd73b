package e2e

// The poison suite (docs/events.md, "Bad input"): what a controller or a guest sends on a bad
// day, served by the simulator on request (/_sim/events/poison, /_sim/odd_fields,
// /_sim/domains/<id>/guest_hostile), with good events and good VMs around it. The contract of
// every row: one bad thing costs only itself, is counted, is said once, and never stops anything
// else. So each row checks, within one deadline, everything at once:
//   - every good event of the journal on the stream once and in order (the checker of the
//     durability suite, classify), the bad event in its documented form;
//   - every good VM exported on /metrics;
//   - the counter (veil_events_rejected_total{reason}, veil_objects_rejected_total{collection,reason});
//   - exactly one warn line of the exporter's log naming the bad object;
//   - NATS connected (veil_nats_connected 1), /-/healthy and /-/ready 200.
// A row that fails reports every facet still wrong at its deadline, not only the first.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

const (
	poisonController = "poison"
	poisonPrefix     = "veil.events"
	// poisonMaxHeaders bounds the headers of any message: a few KiB whatever the number of
	// events at one instant.
	poisonMaxHeaders = 4 << 10
	// poisonMaxLabel bounds every label value on /metrics (label values capped in length).
	poisonMaxLabel = 1024
	// poisonTokenLen is what a subject token from controller data is cut to, before '-' and 8
	// hex characters of a hash.
	poisonTokenLen = 55
	// maxGuestFilesystems is the collector's bound of NICs and disks per guest, which
	// filesystems share: filesystems per VM are capped as NICs and disks are.
	maxGuestFilesystems = 64
)

type poisonRow struct {
	name     string
	guest    bool          // every VM a running Linux guest with an agent, guest checks on
	deadline time.Duration // for everything to hold
	run      func(w *poisonWorld)
}

func TestPoison(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	bins := buildFaultBinaries(t)
	for _, row := range poisonRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			w := newPoisonWorld(t, bins, row)
			row.run(w)
		})
	}
}

// poisonRows are the rows; each one's deadline bounds the wait for its facets to hold, which
// ends as soon as they do: nine rows run at once under the race detector on a machine that may
// be busy, so a deadline says when something is surely wrong, not how fast this machine is.
func poisonRows() []poisonRow {
	return []poisonRow{
		{name: "oversized event", deadline: 90 * time.Second, run: poisonOversized},
		{name: "long type", deadline: 90 * time.Second, run: poisonLongType},
		{name: "bad created", deadline: 90 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonBadCreated) }},
		{name: "missing created", deadline: 90 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonNoCreated) }},
		{name: "missing id", deadline: 90 * time.Second, run: func(w *poisonWorld) { poisonUndecodable(w, veiltest.PoisonNoID) }},
		{name: "future-dated event", deadline: 90 * time.Second, run: poisonFuture},
		{name: "thousands at one instant", deadline: 3 * time.Minute, run: poisonSameInstant},
		{name: "odd field in a listing", deadline: 90 * time.Second, run: poisonOddField},
		{name: "hostile guest answers", guest: true, deadline: 90 * time.Second, run: poisonGuest},
	}
}

// ---- the rows ----

// poisonOversized: a detail_message of 1.5 MiB (max_payload is 1 MiB). The event goes out on
// its normal subject, the same JSON object with its largest fields cut to fit (a string ends in
// "…"), and headers Veil-Rejected: too_large, Veil-Original-Size: <bytes of the event>,
// Veil-Cut-Fields; the events after it go out too.
func poisonOversized(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": veiltest.PoisonHugeDetail, "size": veiltest.DefaultHugeDetail})
	w.goodEvents(5, false)
	facets := w.commonFacets(bad.ID)
	facets["the oversized event in its bounded form"] = func(msgs []streamMsg, _ []byte) error {
		m, err := onceOnStream(msgs, bad.ID)
		if err != nil {
			return err
		}
		var errs []string
		if want := poisonPrefix + "." + poisonController + ".info.domain"; m.subject != want {
			errs = append(errs, fmt.Sprintf("subject %q, want %q", m.subject, want))
		}
		if h := m.header.Get("Veil-Rejected"); h != "too_large" {
			errs = append(errs, fmt.Sprintf("Veil-Rejected %q, want too_large", h))
		}
		if h := m.header.Get("Veil-Cut-Fields"); !strings.Contains(h, "detail_message") {
			errs = append(errs, fmt.Sprintf("Veil-Cut-Fields %q, want detail_message among them", h))
		}
		if h := m.header.Get("Veil-Original-Size"); h != strconv.Itoa(bad.Size) {
			errs = append(errs, fmt.Sprintf("Veil-Original-Size %q, want %d (the event's JSON as the API sent it)", h, bad.Size))
		}
		var body struct {
			ID            string `json:"id"`
			Created       string `json:"created"`
			Type          string `json:"type"`
			DetailMessage string `json:"detail_message"`
		}
		if err := json.Unmarshal(m.data, &body); err != nil {
			errs = append(errs, fmt.Sprintf("body of %d bytes is not a JSON object: %v", len(m.data), err))
		} else if body.ID != bad.ID || body.Created != bad.Created || body.Type != bad.Type || !strings.HasSuffix(body.DetailMessage, "…") {
			errs = append(errs, fmt.Sprintf("body %s, want id %s, created %s, type %s, detail_message cut with …",
				cut(string(m.data), 300), bad.ID, bad.Created, bad.Type))
		}
		if len(m.data)+m.hdrBytes > 1<<20 {
			errs = append(errs, fmt.Sprintf("message of %d bytes, over max_payload", len(m.data)+m.hdrBytes))
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 1) }
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(bad.ID) }
	w.check(facets)
}

// poisonLongType: two events whose types are 5,000 characters, the same for their first
// thousands. Each goes out on a subject whose type token is the sanitized type cut to 64 bytes,
// '-' and 8 hex characters of a hash: bounded, and distinct for distinct types.
func poisonLongType(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	base := strings.Repeat("warning-from-a-very-chatty-plugin ", 150)[:4999]
	a := w.poison(map[string]any{"kind": veiltest.PoisonLongType, "type": base + "a"})
	w.goodEvents(3, false)
	b := w.poison(map[string]any{"kind": veiltest.PoisonLongType, "type": base + "b"})
	w.goodEvents(5, false)
	tokenRE := regexp.MustCompile(`^` + regexp.QuoteMeta(strings.ReplaceAll(base[:poisonTokenLen], " ", "_")) + `-[0-9a-f]{8}$`)
	facets := w.commonFacets(a.ID, b.ID)
	facets["long types on bounded, distinct subjects"] = func(msgs []streamMsg, _ []byte) error {
		var tokens []string
		for _, ev := range []veiltest.PoisonEventInfo{a, b} {
			m, err := onceOnStream(msgs, ev.ID)
			if err != nil {
				return err
			}
			prefix := poisonPrefix + "." + poisonController + "."
			rest, ok := strings.CutPrefix(m.subject, prefix)
			tok, class, _ := strings.Cut(rest, ".")
			if !ok || class != "domain" || !tokenRE.MatchString(tok) {
				return fmt.Errorf("event %s on subject %q (%d bytes), want %s<the type's first %d bytes, sanitized>-<8 hex>.domain",
					ev.ID, cut(m.subject, 200), len(m.subject), prefix, poisonTokenLen)
			}
			tokens = append(tokens, tok)
		}
		if tokens[0] == tokens[1] {
			return fmt.Errorf("two types that differ share the subject token %q", tokens[0])
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 2) }
	facets["said once each"] = func([]streamMsg, []byte) error {
		if err := w.saidOnce(a.ID); err != nil {
			return err
		}
		return w.saidOnce(b.ID)
	}
	w.check(facets)
}

// poisonUndecodable: an event with a bad created, none, or no id goes to the dead-letter
// subject <prefix>.<controller>.invalid with a Veil-Rejected header (the reason), its body naming it
// (its id, or its created when it has no id); the events after it go out.
func poisonUndecodable(w *poisonWorld, kind string) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": kind})
	w.goodEvents(5, false)
	names := bad.ID // what names it: its id, or without one its created
	if names == "" {
		names = bad.Created
	}
	facets := w.commonFacets()
	facets["the event on the dead-letter subject"] = func(msgs []streamMsg, _ []byte) error {
		want := poisonPrefix + "." + poisonController + ".invalid"
		var found []streamMsg
		for _, m := range msgs {
			if m.subject == want {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d messages on %s, want 1", len(found), want)
		}
		m := found[0]
		if m.header.Get("Veil-Rejected") == "" {
			return fmt.Errorf("the message on %s has no Veil-Rejected header: %v", want, m.header)
		}
		if !bytes.Contains(m.data, []byte(names)) {
			return fmt.Errorf("the message on %s does not name the event (%s): %s", want, names, cut(string(m.data), 300))
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error { return eventsRejected(m, 1) }
	said := names // the log line names it by its ce-time, which RFC 3339 writes without trailing zeros
	if bad.ID == "" {
		if t, err := time.Parse(time.RFC3339Nano, bad.Created); err == nil {
			said = t.UTC().Format(time.RFC3339Nano)
		}
	}
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(said) }
	w.check(facets)
}

// poisonFuture: an event dated an hour ahead (the controller's clock), then events dated now,
// which ordering by created lists before it. It never makes them count as published: every one
// goes out once, in the journal's order among themselves, and the future event once too.
func poisonFuture(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	bad := w.poison(map[string]any{"kind": veiltest.PoisonFuture, "offset": "1h"})
	// The events after it come once it is published, in later polls, each time before it.
	testutil.EventuallyNil(w.t, w.row.deadline, func() error {
		msgs, err := w.readStream()
		if err == nil && len(byID(msgs, bad.ID)) == 0 {
			err = fmt.Errorf("not yet")
		}
		return err
	}, "the future-dated event %s on the stream", bad.ID)
	// Each round waits (a little, without failing: the facets below say what is missing) for
	// the stream to hold the journal, so that the rounds come in separate polls.
	for range 3 {
		w.goodEvents(3, false)
		want := len(w.rawJournal())
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if n, err := w.streamLen(); err == nil && n >= want {
				break
			}
		}
	}
	facets := w.commonFacets()
	facets["the future event once"] = func(msgs []streamMsg, _ []byte) error {
		_, err := onceOnStream(msgs, bad.ID)
		return err
	}
	facets["no publish errors"] = func(_ []streamMsg, m []byte) error {
		if v, ok := metricValue(m, "veil_events_publish_errors_total"); ok && v != 0 {
			return fmt.Errorf("veil_events_publish_errors_total %v", v)
		}
		return nil
	}
	w.check(facets)
}

// poisonSameInstant: 3,000 events sharing one created instant. Every one goes out once and in
// order, no publish is refused, and no message's headers grow past a few KiB. (A publish not
// acknowledged within its timeout, on a machine too busy to answer, is retried and no refusal.)
func poisonSameInstant(w *poisonWorld) {
	w.startExporter()
	w.settle()
	w.goodEvents(5, false)
	w.goodEvents(3000, true)
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["headers bounded"] = func(msgs []streamMsg, _ []byte) error {
		worst, at := 0, ""
		for _, m := range msgs {
			if m.hdrBytes > worst {
				worst, at = m.hdrBytes, m.id
			}
		}
		if worst > poisonMaxHeaders {
			return fmt.Errorf("the headers of event %s take %d bytes, want at most %d", at, worst, poisonMaxHeaders)
		}
		return nil
	}
	facets["no publish refused"] = func(_ []streamMsg, m []byte) error {
		v, _ := metricValue(m, "veil_events_publish_errors_total")
		failed := w.warnLines("event forwarding failed")
		for _, l := range failed {
			if !strings.Contains(l, "not acknowledged") {
				return fmt.Errorf("a publish failed for another reason than an acknowledgement's timeout: %s", cut(l, 300))
			}
		}
		if v != 0 && len(failed) == 0 {
			return fmt.Errorf("veil_events_publish_errors_total %v, and no failure said", v)
		}
		return nil
	}
	w.check(facets)
}

// domainIDs lists the simulator's VM ids.
func (w *poisonWorld) domainIDs() []string {
	w.t.Helper()
	var ids struct {
		Domains []string `json:"domains"`
	}
	if err := json.Unmarshal(get(w.t, w.sim+"/_sim/ids"), &ids); err != nil {
		w.t.Fatal(err)
	}
	return ids.Domains
}

// everyVMExported: veil_domain_info of every VM in ids.
func everyVMExported(m []byte, ids []string) error {
	have := map[string]bool{}
	for _, s := range samples(m, "veil_domain_info") {
		have[s.labels["domain_id"]] = true
	}
	var missing []string
	for _, id := range ids {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d good VMs not exported (veil_domain_info): %v", len(missing), len(ids), first(missing))
	}
	return nil
}

// poisonOddField: one VM's memory_count is "n/a" (as a platform upgrade can bring) from
// before the exporter starts (the restart case). Every other VM is exported, the controller is
// up, the odd VM is counted in veil_objects_rejected_total{collection="domains",reason} and said
// once with the field.
func poisonOddField(w *poisonWorld) {
	ids := w.domainIDs()
	odd := ids[len(ids)/2]
	good := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == odd })
	w.simPost("/_sim/odd_fields", fmt.Sprintf(`[{"collection":"domains","id":%q,"field":"memory_count","value":"n/a"}]`, odd))
	w.startExporter()
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["every good VM exported"] = func(_ []streamMsg, m []byte) error { return everyVMExported(m, good) }
	facets["counted"] = func(_ []streamMsg, m []byte) error {
		n, seen := rejected(m, "veil_objects_rejected_total", []string{"collection", "reason"},
			func(l map[string]string) bool { return l["collection"] == "domains" })
		if n < 1 {
			return fmt.Errorf(`veil_objects_rejected_total{collection="domains",reason} is %v (%v), want at least 1`, n, seen)
		}
		return nil
	}
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(odd, "memory_count") }
	w.check(facets)
}

// poisonGuest: hostile guest agents. VM a answers guest-get-fsinfo with 5,000 filesystems, VM b
// guest-get-osinfo with strings of 100,000 characters, VM c guest-get-fsinfo with wrong types
// in its first filesystem (the others good). Every VM is exported with its good guest data; a's
// filesystems are capped as NICs and disks are; no label value is longer than poisonMaxLabel;
// c's bad filesystem is counted and said once, its good ones exported.
func poisonGuest(w *poisonWorld) {
	ids := w.domainIDs()
	a, b, c := ids[0], ids[1], ids[2]
	w.simPost("/_sim/domains/"+a+"/guest_hostile", `{"command":"guest-get-fsinfo","kind":"many","n":5000}`)
	w.simPost("/_sim/domains/"+b+"/guest_hostile", `{"command":"guest-get-osinfo","kind":"long_strings","size":100000}`)
	w.simPost("/_sim/domains/"+c+"/guest_hostile", `{"command":"guest-get-fsinfo","kind":"wrong_types"}`)
	w.startExporter()
	w.goodEvents(5, false)
	facets := w.commonFacets()
	facets["every VM exported"] = func(_ []streamMsg, m []byte) error { return everyVMExported(m, ids) }
	facets["good guests' data exported"] = func(_ []streamMsg, m []byte) error {
		fs, osi := map[string]int{}, map[string]bool{}
		for _, s := range samples(m, "veil_guest_filesystem_size_bytes") {
			fs[s.labels["domain_id"]]++
		}
		for _, s := range samples(m, "veil_guest_os_info") {
			osi[s.labels["domain_id"]] = true
		}
		var errs []string
		for _, id := range ids {
			if id != a && id != c && fs[id] == 0 {
				errs = append(errs, "no filesystem of "+id)
			}
			if !osi[id] {
				errs = append(errs, "no veil_guest_os_info of "+id)
			}
		}
		if fs[a] < 1 || fs[a] > maxGuestFilesystems {
			errs = append(errs, fmt.Sprintf("%d filesystems of %s (it reports 5,000), want 1 to %d", fs[a], a, maxGuestFilesystems))
		}
		var boot bool
		for _, s := range samples(m, "veil_guest_filesystem_size_bytes") {
			boot = boot || s.labels["domain_id"] == c && s.labels["mountpoint"] == "/boot/efi"
		}
		if !boot {
			errs = append(errs, "the good /boot/efi filesystem of "+c+" (its / is the bad one) is not exported")
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	facets["label values bounded"] = func(_ []streamMsg, m []byte) error {
		for _, l := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			for _, lv := range labelRE.FindAllStringSubmatch(l, -1) {
				if len(lv[2]) > poisonMaxLabel {
					return fmt.Errorf("label %s of %s is %d bytes, want at most %d", lv[1], cut(l, 60), len(lv[2]), poisonMaxLabel)
				}
			}
		}
		return nil
	}
	facets["counted"] = func(_ []streamMsg, m []byte) error {
		n, seen := rejected(m, "veil_objects_rejected_total", []string{"collection", "reason"},
			func(l map[string]string) bool {
				return strings.Contains(l["collection"], "fsinfo") || strings.Contains(l["collection"], "guest")
			})
		if n < 1 {
			return fmt.Errorf("veil_objects_rejected_total{collection=<guest fsinfo>,reason} is %v (%v), want at least 1", n, seen)
		}
		return nil
	}
	facets["said once"] = func([]streamMsg, []byte) error { return w.saidOnce(c, "fsinfo") }
	w.check(facets)
}
