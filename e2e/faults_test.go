package e2e

// This file holds the fault table: its rows and how one row runs. The rig is in
// faults_rig_test.go, the scrape watcher and the slow NATS proxy in faults_watch_test.go.

import (
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// The fault table: for each neighbour of the exporter — the controller's API
// and NATS — and each way it can fail — down at start, down during, flapping, slow — the real
// veil-exporter binary, run against the veil-sim binary and an embedded NATS server, must
//
//   - answer every /metrics scrape with 200 within a 10 s scrape timeout, and /-/healthy with
//     200 throughout (no neighbour's fault is mended by restarting the exporter);
//   - say the truth while the fault lasts: veil_up, veil_nats_connected and /-/ready (with its
//     reason) as the row expects;
//   - once the fault is gone, have every event of the simulator's journal on the JetStream
//     stream exactly once, in the journal's order;
//   - log each episode once when it starts and once when it ends, never once per retry.
//
// How the faults are made, and why:
//
//   - Controller down: the simulator's fault injection answers every /api/ request with a TCP
//     reset. Killing the simulator would lose its journal (it lives in memory), which a real
//     controller restarting does not: the events created while the API is unreachable must still
//     be there to be forwarded afterwards. A reset on every request is what the exporter sees of
//     a controller whose API host is gone; the control API (/_sim/) keeps working, so events are
//     still created "behind" the unreachable API.
//   - Controller slow: every /api/ answer is held 5 s (the simulator's latency). That is half
//     the request timeout (10 s, the default) but five times collect.interval (1 s here), and a
//     refresh never outlives its interval: every refresh fails, veil_up is 0 and one controller
//     episode is logged, while the event forwarder (bounded by the request timeout) goes on.
//   - NATS down: the embedded server is shut down and started again on the same port and store.
//   - NATS slow: the exporter reaches NATS through a proxy that holds every answer (server to
//     client bytes) 5 s. That equals the default JetStream timeouts (publish_timeout 5s, KV
//     operations 5s), so forwarding may fail while it lasts: at most one forwarding episode, and
//     never a NATS-down one (the connection stays up).
//   - Flapping: down about 2.5 s, up about 2.5 s, three times. An episode is an outage the
//     exporter saw: a flap may be merged with the next when the exporter did not reconnect in
//     between (NATS reconnects with backoff), so "once per episode" means the start and end lines
//     strictly alternate, beginning with a start and ending with an end, one pair per flap at
//     most and at least one pair in all.
func TestFaultTable(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	bins := buildFaultBinaries(t)
	for _, row := range faultRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			runFaultRow(t, bins, row)
		})
	}
}

type faultTarget int

const (
	controllerAPI faultTarget = iota
	natsServer
)

type faultMode int

const (
	downAtStart faultMode = iota
	downDuring
	flapping
	slow
)

// A logPair is the start and end lines of one kind of episode (messages of the exporter's log).
type logPair struct {
	name       string
	start, end []string // a line is a start (end) when it contains any of these
}

var (
	controllerEpisode = logPair{"controller",
		[]string{`msg="controller down: inventory refresh failed`},
		[]string{`msg="controller back up: inventory refresh succeeded"`}}
	natsEpisode = logPair{"NATS",
		[]string{`msg="NATS unreachable;`, `msg="NATS disconnected;`},
		[]string{`msg="NATS connected"`}}
	forwardingEpisode = logPair{"forwarding",
		[]string{`msg="event forwarding failed;`, `msg="event forwarding still failing;`},
		[]string{`msg="event forwarding recovered"`}}
)

// episodeWant bounds how many episodes of a pair the row may log after its mark. initialEnd
// allows one end line before any start: NATS connecting at the exporter's start.
type episodeWant struct {
	pair               logPair
	minPairs, maxPairs int
	initialEnd         bool
}

type faultRow struct {
	name   string
	target faultTarget
	mode   faultMode
	// during says what the exporter shows while the fault lasts: veil_up, veil_nats_connected
	// and /-/ready's status, with a word its body must hold.
	up, natsConnected float64
	readyCode         int
	readyWord         string
	episodes          []episodeWant
}

// flaps is how many outages a flapping row makes.
const flaps = 3

func faultRows() []faultRow {
	one := func(p logPair) episodeWant { return episodeWant{pair: p, minPairs: 1, maxPairs: 1} }
	none := func(p logPair) episodeWant { return episodeWant{pair: p} }
	atMostOne := func(p logPair) episodeWant { return episodeWant{pair: p, maxPairs: 1} }
	perFlap := func(p logPair, min int) episodeWant { return episodeWant{pair: p, minPairs: min, maxPairs: flaps} }
	natsAtStart := episodeWant{pair: natsEpisode, initialEnd: true}
	return []faultRow{
		// Ready once the first refresh has finished, failed or not: a controller that is down is
		// not a reason to take the exporter out of service (veil_up 0 says it, and must be
		// scraped to be seen); ready only waits for the first attempt.
		{name: "controller/down at start", target: controllerAPI, mode: downAtStart,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), one(forwardingEpisode), natsAtStart}},
		// Serving the last good data, with veil_up 0 saying it is old.
		{name: "controller/down during", target: controllerAPI, mode: downDuring,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), one(forwardingEpisode), none(natsEpisode)}},
		{name: "controller/flapping", target: controllerAPI, mode: flapping,
			up: -1, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{perFlap(controllerEpisode, 1), perFlap(forwardingEpisode, 1), none(natsEpisode)}},
		// A refresh that lists only what the push channel does not carry never outlives three
		// intervals (inventory.RefreshLimit): with answers that slow every such refresh fails,
		// so veil_up says 0 and the controller is logged down once, although each request ends
		// within its timeout. Events, bounded by the request timeout only, keep flowing without
		// an episode.
		{name: "controller/slow", target: controllerAPI, mode: slow,
			up: 0, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{one(controllerEpisode), none(forwardingEpisode), none(natsEpisode)}},
		{name: "nats/down at start", target: natsServer, mode: downAtStart,
			up: 1, natsConnected: 0, readyCode: 503, readyWord: "NATS",
			episodes: []episodeWant{one(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
		{name: "nats/down during", target: natsServer, mode: downDuring,
			up: 1, natsConnected: 0, readyCode: 503, readyWord: "NATS",
			episodes: []episodeWant{one(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
		{name: "nats/flapping", target: natsServer, mode: flapping,
			up: 1, natsConnected: -1, readyCode: -1,
			episodes: []episodeWant{perFlap(natsEpisode, 1), perFlap(forwardingEpisode, 0), none(controllerEpisode)}},
		{name: "nats/slow", target: natsServer, mode: slow,
			up: 1, natsConnected: 1, readyCode: 200,
			episodes: []episodeWant{none(natsEpisode), atMostOne(forwardingEpisode), none(controllerEpisode)}},
	}
}

const (
	faultController = "faults"
	faultStream     = "VEIL_EVENTS"
	scrapeTimeout   = 10 * time.Second
	flapHalf        = 2500 * time.Millisecond // each flap: this long down, then this long up
	faultWindow     = 6 * time.Second         // how long a down or slow fault is held
	slowAnswer      = 5 * time.Second
)

func runFaultRow(t *testing.T, bins faultBinaries, row faultRow) {
	r := newFaultRig(t, bins, row)

	// Events flow the whole time the fault is on: two every 400 ms, created behind the API.
	feeder := r.feed()
	defer feeder.stop()

	var mark int // log offset where this row's episodes begin
	if row.mode == downAtStart {
		r.apply(row, true)
	}
	r.startExporter()
	scrapes := watchScrapes(r.web)
	defer scrapes.stop()

	var removed time.Time
	switch row.mode {
	case downAtStart:
		r.checkTruth(row, faultWindow)
		// Observation window: the fault stays a while so that events pile up behind it.
		time.Sleep(faultWindow / 2)
		r.checkTruth(row, 3*time.Second) // and still at the end
		r.apply(row, false)
		removed = time.Now()
	case downDuring, slow:
		r.settle()
		mark = r.logLen()
		r.apply(row, true)
		deadline := time.Now().Add(faultWindow)
		if row.mode == slow {
			// Long enough for several 5 s answers to be waited for.
			deadline = time.Now().Add(2*slowAnswer + time.Second)
		}
		r.checkTruth(row, time.Until(deadline))
		// Observation window: the rest of the fault, while scrapes and events go on.
		time.Sleep(time.Until(deadline))
		r.checkTruth(row, 3*time.Second) // and still at the end
		r.apply(row, false)
		removed = time.Now()
	case flapping:
		r.settle()
		mark = r.logLen()
		for range flaps {
			r.apply(row, true)
			// Observation windows: the flap's down half, then its up half.
			time.Sleep(flapHalf)
			r.apply(row, false)
			removed = time.Now()
			time.Sleep(flapHalf)
		}
	}
	feeder.stop()
	during, _ := r.streamLen() // events on the stream when the fault went (for the record)

	// After the fault: one more burst, then everything must be there, once and in order.
	r.addEvents(5)
	want := r.journal()
	var got []string
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		if err := r.healthyNow(); err != nil {
			return err
		}
		var err error
		got, err = r.streamIDs(len(want))
		return err
	}, "the exporter to recover and forward all %d events", len(want))
	recovered := time.Since(removed)
	exactlyOnceInOrder(t, row.name, want, got)

	r.checkEpisodes(row, mark)
	n, longest, problems := scrapes.finish()
	for _, p := range problems {
		t.Error(p)
	}
	if n == 0 {
		t.Error("no scrape was made")
	}
	t.Logf("FAULT-ROW %-26s events=%d on_stream_at_fault_end=%d scrapes=%d longest_scrape=%v recovered_in=%v",
		row.name, len(want), during, n, longest.Round(time.Millisecond), recovered.Round(time.Millisecond))
}
