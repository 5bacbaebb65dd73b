package e2e

// The durability suite: faults harder than the fault table's, composed and
// repeated, over real processes (veil-exporter and veil-sim binaries; an embedded NATS server,
// or a three-node cluster of natsnode processes), while events keep coming. Every row ends with
// the checker of durability_check_test.go: the whole stream read back and every id of the
// journal classified ok / lost / duplicated / out of order. Every row must hold 0 lost of what
// the journal still holds, 0 duplicated, in order; the table of all rows is printed at the end.
//
// VEIL_FAULTS_SCALE (default 1) multiplies every row's rounds: `make faults` runs it longer.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

type durabilityRow struct {
	name, what string
	cluster    bool
	partition  bool // the cluster Partitionable, the exporter connected through its client links
	run        func(w *durabilityWorld) history
}

func TestDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: not in -short")
	}
	scale := 1
	if s := os.Getenv("VEIL_FAULTS_SCALE"); s != "" {
		var err error
		if scale, err = strconv.Atoi(s); err != nil || scale < 1 {
			t.Fatalf("VEIL_FAULTS_SCALE=%q: want a positive integer", s)
		}
	}
	bins := buildFaultBinaries(t)
	table := &durabilityTable{}
	t.Cleanup(func() { table.print(t) })
	for _, row := range durabilityRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			w := newDurabilityWorld(t, bins, row.cluster, row.partition, scale)
			h := row.run(w)
			w.feeder.stop()
			want := w.journal()
			end := time.Now()
			testutil.EventuallyNil(t, 90*time.Second, func() error {
				n, err := w.streamLen()
				if err == nil && n < len(want) {
					err = fmt.Errorf("%d of %d events on the stream", n, len(want))
				}
				return err
			}, "every journal id on the stream after %s", row.name)
			if h.ended.IsZero() {
				h.ended = end
			}
			h.recovered = time.Since(h.ended)
			judge(t, table, row.name, w.js, faultController, want, h)
		})
	}
}

func durabilityRows() []durabilityRow {
	rows := []durabilityRow{
		{name: "position volume lost", what: "kill -9, the position file's directory deleted, restart", run: positionVolumeLost},
		{name: "stream's newest messages lost", what: "kill -9, the newest 25 messages deleted, NATS restarted, restart", run: newestMessagesLost},
		{name: "duplicate window 1s, kill -9", what: "stream with a 1 s duplicate window; kill -9 mid-batch, restart", run: shortWindowKills},
		{name: "acks lost after store", what: "NATS's replies dropped (toxiproxy) until a batch is stored", run: acksLost},
		{name: "position disk full", what: "the position file's tmpfs filled, kill -9 while full, space back", run: positionDiskFull},
		{name: "cluster killed mid-batch", what: "all three NATS nodes kill -9 while a batch is published, restarted", cluster: true, run: clusterKilled},
		{name: "stream leader paused", what: "SIGSTOP of the stream leader until another is elected, SIGCONT", cluster: true, run: leaderPaused},
		{name: "owner paused past lease", what: "two replicas; SIGSTOP of the owner until its successor publishes, SIGCONT", cluster: true, run: ownerPaused},
	}
	return append(rows, partitionRows()...)
}

// durabilityWorld is one row's world: the simulator with a feeder adding events the whole time,
// NATS (one embedded server, or a three-node cluster), and the exporters the row starts.
type durabilityWorld struct {
	*faultRig
	cluster *testutil.Cluster // nil for one embedded server
	natsURL string            // what the exporter connects to
	rounds  int               // the row's repetitions are this many times its base count
	feeder  *feeder
	nodeJS  map[*testutil.NATS]jetstream.JetStream // clients of one node each (leaderSeenBy)
}

func newDurabilityWorld(t *testing.T, bins faultBinaries, cluster, partition bool, scale int) *durabilityWorld {
	w := &durabilityWorld{faultRig: newSimRig(t, bins, freeAddr(t)), rounds: scale}
	switch {
	case partition:
		w.cluster = testutil.StartCluster(t, testutil.Partitionable())
		w.natsURL = w.cluster.ClientURLs()
	case cluster:
		w.cluster = testutil.StartCluster(t)
		w.natsURL = w.cluster.URLs()
	default:
		w.nats = testutil.StartNATS(t)
		w.natsURL = w.nats.URL()
	}
	if partition { // the checker's own connection passes no link
		w.connect(w.cluster.URLs())
	} else {
		w.connect(w.natsURL)
	}
	w.feeder = w.feed()
	t.Cleanup(w.feeder.stop)
	return w
}

// exporterOpts is what a row sets of the exporter's configuration.
type exporterOpts struct {
	natsURL   string        // default: the world's
	posDir    string        // the file store's directory; empty: the nats_kv store
	dupWindow time.Duration // 0: proofWindow
	ha        string        // the ha section, empty without
}

// exporter writes a configuration and returns the exporter process (not started), killed when
// the test ends.
func (w *durabilityWorld) exporter(name string, o exporterOpts) *replicaProc {
	w.t.Helper()
	if o.natsURL == "" {
		o.natsURL = w.natsURL
	}
	if o.dupWindow == 0 {
		o.dupWindow = proofWindow
	}
	store := "{store: nats_kv}"
	if o.posDir != "" {
		store = fmt.Sprintf("{store: file, dir: %q}", o.posDir)
	}
	js := "{stream: " + faultStream + ", duplicate_window: " + o.dupWindow.String() + "}"
	cfg := fmt.Sprintf(`controllers:
  - name: %s
    url: %s
    token_file: %s
collect: {interval: 1s}
guest: {enabled: false}
events:
  poll_interval: 100ms
  start: earliest
  checkpoint: %s
nats:
  url: %q
  jetstream: %s
%s`, faultController, w.sim, filepath.Join(w.dir, "token"), store, o.natsURL, js, o.ha)
	path := filepath.Join(w.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
	p := &replicaProc{t: w.t, bin: w.bins.exporter, cfg: path, web: freeAddr(w.t), logPath: filepath.Join(w.dir, name+".log")}
	p.endWithTest(w.t, name)
	return p
}

// proofWindow is the duplicate window of every row's stream: shorter than any row's faults, so
// that NATS's de-duplication never stops a republish and only the forwarder's stream position
// and its expectation headers can; a repeat would show as duplicated.
const proofWindow = time.Second

// createStream creates the stream as an operator provisions it: atomic batches allowed, the
// given duplicate window (0: proofWindow) and replicas.
func (w *durabilityWorld) createStream(dup time.Duration, replicas int) {
	w.t.Helper()
	if dup == 0 {
		dup = proofWindow
	}
	testutil.EventuallyNil(w.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: faultStream, Subjects: []string{"veil.events.>"},
			Duplicates: dup, Replicas: replicas, AllowAtomicPublish: true})
		return err
	}, "stream %s to be created", faultStream)
}

// count is how many messages the stream holds now, retried while NATS is coming back.
func (w *durabilityWorld) count() int {
	w.t.Helper()
	var n int
	testutil.EventuallyNil(w.t, 60*time.Second, func() error {
		var err error
		n, err = w.streamLen()
		return err
	}, "the stream's length")
	return n
}

// grows waits until the stream holds more than before: a publish of the row's exporter has
// been stored.
func (w *durabilityWorld) grows(before int, what string) {
	w.t.Helper()
	testutil.EventuallyNil(w.t, 60*time.Second, func() error {
		n, err := w.streamLen()
		if err == nil && n <= before {
			err = fmt.Errorf("still %d messages", n)
		}
		return err
	}, "the stream to grow (%s)", what)
}

// caughtUp waits until the stream holds every event of the journal now.
func (w *durabilityWorld) caughtUp() {
	w.t.Helper()
	want := len(w.journal())
	testutil.EventuallyNil(w.t, 60*time.Second, func() error {
		n, err := w.streamLen()
		if err == nil && n < want {
			err = fmt.Errorf("%d of %d", n, want)
		}
		return err
	}, "the stream to catch up with the journal")
}

// tally adds the exporter's rewind and conflict counters to h (read before a kill: a restart
// starts them at 0).
func (h *history) tally(p *replicaProc) {
	_, m, err := httpGet("http://" + p.web + "/metrics")
	if err != nil {
		return
	}
	if v, ok := metricValue(m, "veil_events_rewinds_total"); ok {
		h.rewinds += v
	}
	if v, ok := metricValue(m, "veil_events_publish_conflicts_total"); ok {
		h.conflicts += v
	}
}

// killMidBatch adds a burst of events, waits until the exporter has stored some of them and
// kills it with SIGKILL at once: most likely in the middle of publishing the burst.
func (w *durabilityWorld) killMidBatch(p *replicaProc, h *history, burst int) {
	w.t.Helper()
	before := w.count()
	w.addEvents(burst)
	w.grows(before, "a burst")
	h.tally(p)
	p.signal(syscall.SIGKILL)
	p.wait()
	h.faults++
}

func positionVolumeLost(w *durabilityWorld) history {
	var h history
	pos := filepath.Join(w.dir, "position")
	p := w.exporter("exporter", exporterOpts{posDir: pos})
	p.start()
	for range 2 * w.rounds {
		w.killMidBatch(p, &h, 60)
		if err := os.RemoveAll(pos); err != nil {
			w.t.Fatal(err)
		}
		p.start()
		h.ended = time.Now()
	}
	h.tally(p)
	return h
}

func newestMessagesLost(w *durabilityWorld) history {
	var h history
	p := w.exporter("exporter", exporterOpts{})
	p.start()
	const drop = 25
	for range 2 * w.rounds {
		w.addEvents(60)
		w.caughtUp()
		h.tally(p)
		p.signal(syscall.SIGKILL)
		p.wait()
		// NATS loses its newest messages, as a power loss after an acknowledged, unsynced write
		// does: they are deleted, then the server restarts, so that its duplicate tracking is
		// rebuilt from what it holds (the lost messages are not in it either).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := w.js.Stream(ctx, faultStream)
		if err != nil {
			cancel()
			w.t.Fatal(err)
		}
		last := s.CachedInfo().State.LastSeq
		for seq := last; seq > last-drop; seq-- {
			if err := s.DeleteMsg(ctx, seq); err != nil {
				cancel()
				w.t.Fatalf("deleting message %d: %v", seq, err)
			}
		}
		cancel()
		w.nats.Stop()
		w.nats.Start()
		h.faults++
		p.start()
		h.ended = time.Now()
	}
	w.caughtUp()
	h.tally(p)
	if h.rewinds < 1 {
		w.t.Errorf("the stream lost its newest messages %d times, but veil_events_rewinds_total counted %v", h.faults, h.rewinds)
	}
	return h
}

func shortWindowKills(w *durabilityWorld) history {
	var h history
	w.createStream(time.Second, 1)
	p := w.exporter("exporter", exporterOpts{dupWindow: time.Second})
	p.start()
	for range 10 * w.rounds {
		w.killMidBatch(p, &h, 40)
		p.start()
		h.ended = time.Now()
	}
	h.tally(p)
	return h
}

func acksLost(w *durabilityWorld) history {
	var h history
	proxy := startSlowProxy(w.t, strings.TrimPrefix(w.natsURL, "nats://"))
	// The position in a file: a nats_kv position's save would wait for its answer too, and
	// publishing pauses until the position is stored.
	p := w.exporter("exporter", exporterOpts{natsURL: "nats://" + proxy.addr(), posDir: filepath.Join(w.dir, "position")})
	p.start()
	// Which request is unanswered first (a publish, or the position's read) depends on how fast
	// the machine runs the forwarder: rounds go on, up to four times as many, until one held a
	// stored batch's acknowledgement.
	for round := 0; round < 3*w.rounds || h.faults == 0 && round < 12*w.rounds; round++ {
		w.caughtUp()
		before := w.count()
		// NATS's answers are held past the publish timeout (5 s): the server stores the batch,
		// its acknowledgement reaches the forwarder only after it gave up on it.
		mark := logSize(w.t, p.logPath)
		proxy.setDelay(7 * time.Second)
		w.addEvents(40)
		// Held until the forwarder says something went unanswered: a batch it published (stored
		// by the server, its acknowledgement still held), or a request it makes before publishing
		// (the position read from the stream after a lost acknowledgement). Releasing the answers
		// earlier, as soon as the stream grew, let an acknowledgement arrive within the publish
		// timeout: no failure, and nothing to recover from.
		testutil.Eventually(w.t, 60*time.Second, func() bool {
			return strings.Contains(logFrom(w.t, p.logPath, mark), "event forwarding failed")
		}, "a publish or a request of the forwarder unanswered")
		n, err := w.streamLen()
		stored := err == nil && n > before
		proxy.setDelay(0)
		h.ended = time.Now()
		// The answers already held still come late: the round ends when the forwarder says it
		// recovered (it read its position from the stream again).
		testutil.Eventually(w.t, 60*time.Second, func() bool {
			return strings.Contains(logFrom(w.t, p.logPath, mark), "event forwarding recovered")
		}, "the forwarder to say it recovered")
		if stored {
			h.faults++
		}
	}
	w.caughtUp()
	h.tally(p)
	if h.faults == 0 {
		w.t.Errorf("no batch was stored while its acknowledgement was held, in %d rounds", 12*w.rounds)
	}
	if !strings.Contains(logFrom(w.t, p.logPath, 0), "publish not acknowledged") {
		w.t.Error("the forwarder never logged an unacknowledged publish")
	}
	return h
}

func positionDiskFull(w *durabilityWorld) history {
	var h history
	pos := filepath.Join(w.dir, "position")
	if err := os.MkdirAll(pos, 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", pos, "tmpfs", 0, "size=64k"); err != nil {
		w.t.Skipf("cannot mount a small tmpfs for the position (needs root, or CAP_SYS_ADMIN): %v — this row did not run", err)
	}
	w.t.Cleanup(func() { _ = syscall.Unmount(pos, syscall.MNT_DETACH) })
	p := w.exporter("exporter", exporterOpts{posDir: pos})
	p.start()
	scrapes := watchScrapes("http://" + p.web)
	w.addEvents(30)
	w.caughtUp()
	filler := filepath.Join(pos, "filler")
	fill(w.t, filler)
	h.faults++
	full := func(mark int, what string) {
		testutil.Eventually(w.t, 30*time.Second, func() bool {
			return strings.Contains(logFrom(w.t, p.logPath, mark), "no space left on device")
		}, "the exporter to log that the position's disk is full (%s)", what)
		for _, path := range []string{"/metrics", "/-/healthy"} {
			if code, _, err := httpGet("http://" + p.web + path); err != nil || code != 200 {
				w.t.Errorf("%s with the position's disk full (%s): %d %v", path, what, code, err)
			}
		}
	}
	mark := logSize(w.t, p.logPath)
	w.addEvents(40)
	full(mark, "running")
	// Killed while the disk is full: it must resume from the stream, whatever the file holds,
	// and say again what is wrong.
	h.tally(p)
	_, _, problems := scrapes.finish()
	p.signal(syscall.SIGKILL)
	p.wait()
	h.faults++
	mark = logSize(w.t, p.logPath)
	p.start()
	scrapes = watchScrapes("http://" + p.web)
	w.addEvents(40)
	full(mark, "restarted")
	if err := os.Remove(filler); err != nil {
		w.t.Fatal(err)
	}
	h.ended = time.Now()
	_, _, more := scrapes.finish()
	for _, pr := range append(problems, more...) {
		w.t.Error(pr)
	}
	h.tally(p)
	return h
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			return
		}
	}
}

func logSize(t *testing.T, path string) int {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Size())
}

func logFrom(t *testing.T, path string, mark int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(mark, len(b)):])
}

func clusterKilled(w *durabilityWorld) history {
	var h history
	w.createStream(0, 3)
	p := w.exporter("exporter", exporterOpts{})
	p.start()
	for range 2 * w.rounds {
		w.caughtUp()
		before := w.count()
		w.addEvents(300)
		w.grows(before, "a burst")
		for _, n := range w.cluster.Nodes {
			n.Kill()
		}
		for _, n := range w.cluster.Nodes {
			n.Start()
		}
		h.ended = time.Now()
		h.faults++
	}
	w.caughtUp()
	h.tally(p)
	return h
}

func leaderPaused(w *durabilityWorld) history {
	var h history
	w.createStream(0, 3)
	p := w.exporter("exporter", exporterOpts{})
	p.start()
	for range w.rounds {
		w.caughtUp()
		var leader *testutil.NATS
		testutil.Eventually(w.t, 30*time.Second, func() bool { leader = w.cluster.StreamLeader(faultStream); return leader != nil },
			"a leader of the stream")
		if err := leader.Signal(syscall.SIGSTOP); err != nil {
			w.t.Fatal(err)
		}
		w.addEvents(100)
		testutil.Eventually(w.t, 60*time.Second, func() bool {
			l := w.cluster.StreamLeader(faultStream)
			return l != nil && l != leader
		}, "another leader to be elected while %s sleeps", leader.Name())
		if err := leader.Signal(syscall.SIGCONT); err != nil {
			w.t.Fatal(err)
		}
		h.ended = time.Now()
		h.faults++
	}
	w.caughtUp()
	h.tally(p)
	return h
}

func ownerPaused(w *durabilityWorld) history {
	var h history
	ha := "ha:\n  enabled: true\n  instance: %s\n  lease_ttl: " + haLeaseTTL.String() + "\n  replicas: 3\n"
	procs := map[string]*replicaProc{}
	for _, inst := range []string{"pod-a", "pod-b"} {
		procs[inst] = w.exporter(inst, exporterOpts{ha: fmt.Sprintf(ha, inst)})
		procs[inst].start()
	}
	owner := func(of map[string]*replicaProc) string {
		var o []string
		testutil.Eventually(w.t, 30*time.Second, func() bool { o = ownersOf(of)[faultController]; return len(o) == 1 },
			"one owner of %s", faultController)
		return o[0]
	}
	for range w.rounds {
		w.caughtUp()
		victim := owner(procs)
		procs[victim].signal(syscall.SIGSTOP)
		others := map[string]*replicaProc{}
		for i, p := range procs {
			if i != victim {
				others[i] = p
			}
		}
		owner(others)
		before := w.count()
		w.addEvents(50)
		w.grows(before, "the successor publishing")
		procs[victim].signal(syscall.SIGCONT)
		h.ended = time.Now()
		h.faults++
	}
	w.caughtUp()
	for _, p := range procs {
		h.tally(p)
	}
	return h
}
