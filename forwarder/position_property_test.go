package forwarder

// The position as a property: random journals, whatever their created say, read page by page by
// the forwarder's own reader and publisher, must publish every event once. The journal lives in
// memory and changes while pages are read (events written at the head and, by a clock dated
// ahead and back, below it; ties; retention; deletions), the clock is virtual, the stream is a
// list of messages (position_propstream_test.go; it also answers the reads back a restart makes),
// and the forwarder is killed and started again from the stream and its stored position. No
// NATS, no HTTP.
//
// make test reads 200 journals; make property reads 20,000 (VEIL_PROPERTY_CASES). A failure
// names its seed: VEIL_PROPERTY_SEED=<seed> VEIL_PROPERTY_CASES=1 replays it,
// VEIL_PROPERTY_TRACE=1 logs every step (position_dump_test.go).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/config"
)

// pev is one event of the model journal.
type pev struct {
	key     string    // the model's own key: the id, or the body for an event without a usable one
	at      time.Time // where the journal lists it (its created, or the controller's clock when written)
	seq     int       // written order: ties are listed in it
	raw     string
	kind    string
	deleted bool
}

// propJournal is a journal in memory, oldest first, that the controller writes to while it is
// read: each page read may first apply a change (churn).
type propJournal struct {
	mu     sync.Mutex
	rng    *rand.Rand
	now    *time.Time    // the exporter's clock (virtual)
	skew   time.Duration // the controller's clock less the exporter's, for good
	served time.Time     // the controller's clock when it last answered, to the second (Date)
	lead   time.Duration
	leadN  int // events still to be written with lead
	evs    []*pev
	all    map[string]*pev
	seq    int
	churn  int // per mille of page reads that first change the journal
	bigLen int
}

func (j *propJournal) pageBody(_ context.Context, offset, limit int, ordering string) ([]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.churn > 0 && j.rng.IntN(1000) < j.churn {
		j.changeLocked()
	}
	j.served = j.now.Add(j.skew).Truncate(time.Second)
	list := j.evs
	if ordering == "-created" {
		list = slices.Clone(list)
		slices.Reverse(list)
	}
	end := min(len(list), offset+limit)
	start := min(offset, end)
	raws := make([]string, 0, end-start)
	for _, e := range list[start:end] {
		raws = append(raws, e.raw)
	}
	return fmt.Appendf(nil, `{"count":%d,"next":null,"previous":null,"results":[%s]}`, len(list), strings.Join(raws, ",")), nil
}

// servedAt is the Date of the controller's last answer (veil.Client.ServedAt).
func (j *propJournal) servedAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.served
}

// change writes, deletes or moves the controller's clock, as the controller does between reads.
func (j *propJournal) change() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.changeLocked()
}

func (j *propJournal) changeLocked() {
	switch r := j.rng.IntN(100); {
	case r < 8: // the controller's clock jumps ahead for a while (2 min to 3 h, 1 to 60 events)
		j.lead = time.Duration(2+j.rng.IntN(180)) * time.Minute
		j.leadN = 1 + j.rng.IntN(60)
	case r < 11: // ... or by a second or two, as an NTP-synchronised clock may
		j.lead, j.leadN = time.Duration(j.rng.IntN(2000))*time.Millisecond, 1+j.rng.IntN(20)
	case r < 16: // retention deletes the oldest
		n := min(len(j.evs), 1+j.rng.IntN(5))
		for _, e := range j.evs[:n] {
			e.deleted = true
		}
		j.evs = j.evs[n:]
	case r < 18 && len(j.evs) > 0: // one event deleted anywhere
		i := j.rng.IntN(len(j.evs))
		j.evs[i].deleted = true
		j.evs = slices.Delete(j.evs, i, i+1)
	case r < 26: // several events at one instant
		at := j.writeAt()
		for range 2 + j.rng.IntN(6) {
			j.add(at, j.kind())
		}
	case r < 32: // events that appear late: dated up to settleTime before the controller's clock
		// (a transaction committed late, the clock stepped back), after newer ones were listed
		for range 1 + j.rng.IntN(4) {
			late := time.Duration(j.rng.Int64N(int64(settleTime - time.Millisecond)))
			j.add(j.now.Add(j.skew-late).Truncate(time.Microsecond), j.kind())
		}
	default:
		for range 1 + j.rng.IntN(4) {
			j.add(j.writeAt(), j.kind())
		}
	}
}

// writeAt is the controller's clock: the exporter's and its skew, plus the lead while it lasts.
func (j *propJournal) writeAt() time.Time {
	at := j.now.Add(j.skew + time.Duration(j.rng.IntN(1000))*time.Microsecond)
	if j.leadN > 0 {
		j.leadN--
		at = at.Add(j.lead)
	}
	return at.Truncate(time.Microsecond)
}

// kind picks what is written: mostly ordinary events, sometimes one of DESIGN §8's bad ones.
func (j *propJournal) kind() string {
	switch r := j.rng.IntN(100); {
	case r < 3:
		return "huge"
	case r < 5:
		return "long_type"
	case r < 7:
		return "no_id"
	case r < 9:
		return "bad_created"
	case r < 10:
		return "not_an_object"
	}
	return "good"
}

func (j *propJournal) add(at time.Time, kind string) {
	j.seq++
	id := fmt.Sprintf("ev-%05d", j.seq)
	created := strconv.Quote(at.UTC().Format(time.RFC3339Nano))
	e := &pev{key: id, at: at, seq: j.seq, kind: kind}
	switch kind {
	case "huge":
		e.raw = fmt.Sprintf(`{"id":%q,"type":"error","created":%s,"detail_message":%q}`, id, created, strings.Repeat("x", j.bigLen))
	case "long_type":
		e.raw = fmt.Sprintf(`{"id":%q,"type":%q,"created":%s}`, id, strings.Repeat("t", 300), created)
	case "no_id":
		e.raw = fmt.Sprintf(`{"type":"info","created":%s,"message":"no id %d"}`, created, j.seq)
		e.key = "body:" + e.raw
	case "bad_created":
		e.raw = fmt.Sprintf(`{"id":%q,"type":"info","created":"yesterday"}`, id)
	case "not_an_object":
		e.raw = strconv.Quote(fmt.Sprintf("not an event %d", j.seq))
		e.key = "body:" + e.raw
	default:
		e.raw = fmt.Sprintf(`{"id":%q,"type":"info","created":%s,"entities":[{"entity_uuid":"u","entity_class":"domain"}]}`, id, created)
	}
	i, _ := slices.BinarySearchFunc(j.evs, e, func(a, b *pev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	j.evs = slices.Insert(j.evs, i, e)
	j.all[e.key] = e
}

// propSkew is how far the controller's clock is from the exporter's, for good: mostly in step,
// else behind by seconds to hours (time zones, no NTP) or ahead by less than settleTime.
func propSkew(rng *rand.Rand) time.Duration {
	switch r := rng.IntN(10); {
	case r < 5:
		return 0
	case r < 7:
		return -time.Duration(rng.Int64N(int64(90 * time.Second)))
	case r < 8:
		return -time.Duration(1+rng.IntN(5)) * time.Hour
	default:
		return time.Duration(rng.Int64N(int64(settleTime)))
	}
}

// propCase is one run: a journal, a stream, a stored position and the forwarder of the moment.
type propCase struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	now    time.Time
	j      *propJournal
	s      *propStream
	cp     *memCheckpoint
	fw     *Forwarder
	order  string
	page   int
	conc   int
	limit  int
	cycles int
	starts []int // the stream's length when each cycle began
	// falseDoubts counts the reads of the position the forwarder doubted (errStaleReplica)
	// although the stream answered them all from its newest state; rewinds, the rewinds of the
	// forwarders so far: the stream loses nothing, so each is false when it never answers stale.
	falseDoubts int
	rewinds     uint64
	staleReads  bool // the stream answers some reads stale before it settles
}

// start makes a forwarder as a (re)started process does: the stored position, then the stream.
func (c *propCase) start() {
	ev := config.Default().Events
	ev.Order, ev.Start, ev.PageSize = c.order, "earliest", c.page
	fw := offlineForwarder(c.t, ev, c.conc, c.limit, c.cp)
	fw.reader.pager, fw.out.pub, fw.out.sr = c.j, c.s, c.s
	fw.clock = func() time.Time { return c.now }
	fw.reader.controllerClock, fw.reader.settle = c.j.servedAt, settleTime
	pos, _, err := fw.startPosition(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	fw.pos = pos
	c.fw = fw
}

// cycle is Run's cycle with NATS always there: the stream read first when it must be.
func (c *propCase) cycle() error {
	c.cycles++
	c.s.mu.Lock()
	c.starts = append(c.starts, len(c.s.msgs))
	c.s.mu.Unlock()
	c.fw.mu.Lock()
	mustSync := c.fw.out.mustSync()
	c.fw.mu.Unlock()
	if mustSync {
		if err := c.fw.syncFromStream(context.Background()); err != nil {
			c.s.mu.Lock()
			if c.s.stale == 0 && errors.Is(err, errStaleReplica) {
				c.falseDoubts++
			}
			c.s.mu.Unlock()
			return err
		}
	}
	_, err := c.fw.tail(context.Background(), nil)
	return err
}

func (c *propCase) run(steps int) {
	for range steps {
		switch r := c.rng.IntN(100); {
		case r < 40:
			c.j.change()
		case r < 50:
			c.now = c.now.Add(time.Duration(c.rng.IntN(20_000)) * time.Millisecond)
		case r < 53:
			c.rewinds += c.fw.Status().Rewinds
			c.start() // killed (-9) and started again
		default:
			before := len(c.s.msgs)
			err := c.cycle() // errors (a shifted list, a refused publish) are retried by the next cycle
			c.trace("cycle", before, err)
			continue
		}
		c.trace("step", len(c.s.msgs), nil)
	}
	// The controller stops writing and the clock passes everything dated ahead: every event
	// listed must then be published, once.
	c.j.mu.Lock()
	c.j.churn = 0
	c.j.mu.Unlock()
	c.s.mu.Lock()
	c.s.fail, c.s.stale = 0, 0
	c.s.mu.Unlock()
	c.now = c.now.Add(4 * time.Hour)
	quiet := 0
	var err error
	for i := 0; quiet < 3; i++ {
		if i > 200 {
			c.t.Fatalf("seed %d: the forwarder did not settle in 200 cycles (the last: %v; position %s %v, %d ahead)", c.seed, err, c.fw.pos.Created.Format(time.RFC3339Nano), c.fw.pos.IDs, len(c.fw.pos.Future))
		}
		before := len(c.s.msgs)
		err = c.cycle()
		if i >= 195 {
			c.trace("settling", before, err)
		}
		if (i == 199 || quiet == 2) && os.Getenv("VEIL_PROPERTY_DEBUG") != "" {
			c.dump(c.t)
		}
		if err != nil || len(c.s.msgs) != before {
			quiet = 0
			continue
		}
		quiet++
	}
}

// check judges the stream against the journal, event by event.
func (c *propCase) check() {
	t := c.t
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, e := range c.s.errs {
		t.Errorf("seed %d: %s", c.seed, e)
	}
	if rewinds := c.rewinds + c.fw.Status().Rewinds; c.falseDoubts > 0 || rewinds > 0 && !c.staleReads {
		t.Errorf("seed %d: the stream lost nothing, yet the forwarder doubted %d fresh answers and made %d rewinds (stale reads: %v)", c.seed, c.falseDoubts, rewinds, c.staleReads)
	}
	times := map[string]int{}
	var prev *pev
	for i, m := range c.s.msgs {
		if size := headerBytes(m.header) + len(m.data); size > c.limit {
			t.Errorf("seed %d: message %d is %d bytes, over the limit %d", c.seed, i+1, size, c.limit)
		}
		if hb := headerBytes(m.header); hb > 4096 {
			t.Errorf("seed %d: message %d has %d bytes of headers", c.seed, i+1, hb)
		}
		key := strings.TrimPrefix(m.header.Get(nats.MsgIdHdr), "prod.")
		e := c.j.all[key]
		if e == nil {
			e = c.j.all["body:"+string(m.data)]
		}
		if e == nil {
			t.Errorf("seed %d: message %d (%s) is no event of the journal", c.seed, i+1, key)
			continue
		}
		times[e.key]++
		if times[e.key] == 2 {
			if os.Getenv("VEIL_PROPERTY_DEBUG") != "" {
				for k, mm := range c.s.msgs[:i+1] {
					t.Logf("%d %s ce-time=%s W=%s ids=%s fut=%s", k+1, mm.header.Get(nats.MsgIdHdr), mm.header.Get("ce-time"), mm.header.Get(hdrCreated), mm.header.Get(hdrCreatedIDs), mm.header.Get(hdrFutureCount))
				}
			}
			t.Errorf("seed %d: event %s (%s) published twice", c.seed, e.key, e.kind)
		}
		// The order the stream promises: what one read publishes goes out in the journal's order
		// (pages read at different moments may each miss what was written meanwhile: a later
		// read publishes that).
		if slices.Contains(c.starts, i) {
			prev = nil
		}
		if prev != nil && e.at.Before(prev.at) && e.kind == "good" {
			t.Errorf("seed %d: event %s (at %s) published after %s (at %s) in one read", c.seed, e.key, e.at, prev.key, prev.at)
		}
		if e.kind == "good" {
			prev = e
		}
	}
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	lost := 0
	for _, e := range c.j.evs {
		if times[e.key] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("seed %d: event %s (%s, at %s) listed but never published", c.seed, e.key, e.kind, e.at.Format(time.RFC3339Nano))
			}
		}
	}
	if lost > 0 {
		t.Errorf("seed %d: %d of %d listed events lost; position %s %v ahead %d", c.seed, lost, len(c.j.evs), c.fw.pos.Created.Format(time.RFC3339Nano), c.fw.pos.IDs, len(c.fw.pos.Future))
	}
	if st := c.fw.Status(); st.Backlog != 0 || st.HeldBack != 0 {
		t.Errorf("seed %d: backlog %d, held back %d once everything is published", c.seed, st.Backlog, st.HeldBack)
	}
}

// propCases is how many random journals a run reads: VEIL_PROPERTY_CASES, or 200.
func propCases() int {
	if n, err := strconv.Atoi(os.Getenv("VEIL_PROPERTY_CASES")); err == nil && n > 0 {
		return n
	}
	return 200
}

// TestEveryEventOnceWhateverTheJournalDoes: random journals written while they are read
// (controller clocks ahead by seconds to hours and back, ties, retention and deletions under the
// reader, oversized and odd events), read by the forwarder in either order with random page
// sizes and concurrency, publishes failing now and then, the forwarder killed and started again
// from the stream: every event listed at the end is published exactly once, none twice, each
// within the stream's message limit, in the journal's order.
func TestEveryEventOnceWhateverTheJournalDoes(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("VEIL_PROPERTY_SEED"), 10, 64); err == nil {
		base = s
	}
	n := propCases()
	start := time.Now()
	events := 0
	for i := range n {
		seed := base + uint64(i)
		rng := rand.New(rand.NewPCG(seed, 1))
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		c := &propCase{t: t, seed: seed, rng: rng, now: now, limit: 4096,
			page: 4 + rng.IntN(12), conc: 1 + rng.IntN(4), order: propOrder(rng)}
		c.j = &propJournal{rng: rand.New(rand.NewPCG(seed, 2)), now: &c.now, all: map[string]*pev{}, churn: propChurn(rng), bigLen: 6000,
			skew: propSkew(rng)}
		c.s = &propStream{rng: rand.New(rand.NewPCG(seed, 3)), fail: rng.IntN(100), stale: propStale(rng)}
		c.staleReads = c.s.stale > 0
		c.cp = &memCheckpoint{}
		c.start()
		c.run(20 + rng.IntN(60))
		c.check()
		events += len(c.j.all)
		if t.Failed() {
			t.Fatalf("seed %d failed (order %s, page %d, concurrency %d); replay with VEIL_PROPERTY_SEED=%d VEIL_PROPERTY_CASES=1", seed, c.order, c.page, c.conc, seed)
		}
	}
	t.Logf("%d journals, %d events, in %s (seeds %d..%d)", n, events, time.Since(start).Round(time.Millisecond), base, base+uint64(n)-1)
}

// propOrder is the order a case reads in: oldest first (what events.order auto asks for) or
// newest first.
func propOrder(rng *rand.Rand) string {
	if rng.IntN(2) == 0 {
		return "newest_first"
	}
	return "oldest_first"
}

// propStale is the per mille of reads back a replica not caught up answers: none in half the
// cases, up to 20 % in the others.
func propStale(rng *rand.Rand) int {
	if rng.IntN(2) == 0 {
		return rng.IntN(200)
	}
	return 0
}

// propChurn is the per mille of page reads that change the journal first: none in half the
// cases, up to 30 % in the others.
func propChurn(rng *rand.Rand) int {
	if rng.IntN(2) == 0 {
		return rng.IntN(300)
	}
	return 0
}

// TestARestartRemembersEveryUndecodableEventTheStoredPositionKnows: killed after the stream took a
// batch but before the position was stored, a forwarder resumes from the stream, whose headers
// list only the last few events that do not decode; the ones the stored position knows are
// still known (they were published), so none is published again when re-read under another
// borrowed date.
func TestARestartRemembersEveryUndecodableEventTheStoredPositionKnows(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var stored position
	stored.advance(at, "ev-1")
	for i := range 20 {
		stored.addOdd(fmt.Sprintf("odd-%02d", i))
	}
	cp := &memCheckpoint{}
	if err := cp.Save(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	// The stream's newest message: one event later, the position's Odd as its headers carry it.
	later := stored.clone()
	later.advance(at.Add(time.Second), "ev-2")
	h := nats.Header{nats.MsgIdHdr: {"prod.ev-2"}}
	positionHeaders(h, &later, oldestFirst)
	s := &propStream{rng: rand.New(rand.NewPCG(1, 1)), msgs: []storedMsg{{seq: 1, header: h, data: []byte(`{"id":"ev-2"}`)}}}
	now := at.Add(time.Minute)
	c := &propCase{t: t, now: now, cp: cp, s: s, limit: 4096, page: 10, conc: 1, order: "oldest_first",
		j: &propJournal{rng: rand.New(rand.NewPCG(1, 2)), now: &now, all: map[string]*pev{}}}
	c.start()
	if err := c.fw.syncFromStream(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !c.fw.pos.Created.Equal(at.Add(time.Second)) {
		t.Fatalf("resumed at %s, want the stream's position %s", c.fw.pos.Created, at.Add(time.Second))
	}
	for i := range 20 {
		if id := fmt.Sprintf("odd-%02d", i); !slices.Contains(c.fw.pos.Odd, id) {
			t.Errorf("%s forgotten: the position resumed knows %v", id, c.fw.pos.Odd)
		}
	}
}
