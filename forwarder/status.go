package forwarder

// What a Forwarder reports: its status for the status page, its run status and its metrics.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// Status is what the status page shows of one controller's forwarding.
type Status struct {
	Controller  string
	Order       string    // order in use: oldest_first, newest_first or unknown
	Position    time.Time // created of the newest acknowledged event
	PositionIDs []string  // ids acknowledged at that instant
	Backlog     int       // events known but not yet published
	// Ahead is how many events dated after this machine's clock were published and are
	// remembered by id; HeldBack how many such events the last read left for later (Ahead full).
	Ahead, HeldBack int
	LastAcked       time.Time // when the last acknowledgement arrived (wall clock)
	Published       uint64
	Duplicates      uint64
	Gaps            uint64 // events known to be lost (exact or lower bound)
	// GapEpisodes counts the times continuity with the stored position could not be proven;
	// LastGap describes the latest.
	GapEpisodes uint64
	LastGap     GapEpisode
	// Conflicts counts publishes the stream refused (its newest message of the controller was
	// not the expected one); Rewinds the times the stream held less than the stored position,
	// LastRewind the latest.
	Conflicts  uint64
	Rewinds    uint64
	LastRewind Rewind
	// PositionAdoptions counts the stored position found written by another instance while
	// this replica held the lease, and stored over (a former owner's late write).
	PositionAdoptions uint64
	// Fenced counts the times forwarding waited at the fence (the lease ran out) for a renewal,
	// publishing and saving nothing meanwhile.
	Fenced uint64
	// Republished counts the events published again after a rewind: those the position had
	// already passed when the rewind was noticed.
	Republished uint64
	// StreamSeq is the stream sequence of the controller's newest message (0: none known).
	StreamSeq uint64
	LastError string
	// NotReady says why events are not forwarded now ("" when they are): NATS, stream or
	// position store not available.
	NotReady string
	Stopped  bool // another instance owns the position
	NATS     natsconn.Status
	// Subject is the filter a subscriber uses for this controller's events: <prefix>.<controller>.>
	Subject string
	// Recent holds the last events published and acknowledged, newest first (at most 20).
	Recent []RecentEvent
	// Rejected counts, by reason, the events published in another form than the controller
	// sent them; RecentRejected lists the last of them, newest first (at most 20).
	Rejected       map[string]uint64
	RecentRejected []RejectedEvent
}

// GapEpisode is one time the position's event was found gone with the events after it not
// provably all still there: events created between After and Before may have been deleted
// unread.
type GapEpisode struct {
	At     time.Time // when it was noticed (zero: never)
	After  time.Time // created of the newest event published before it
	Before time.Time // created of the oldest event still listed then (zero: the journal was empty)
	// Lost is how many events are known to be lost (exact or a lower bound; often 0).
	Lost uint64
}

// RecentEvent is one published and acknowledged event as the status page lists it.
type RecentEvent struct {
	ID, Type, Subject, Message string
	Created                    time.Time
}

// recentLen bounds Status.Recent and Status.RecentRejected (ring).
const recentLen = 20

// Status reports position, backlog, publishing and NATS state.
func (fw *Forwarder) Status() Status {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	s := Status{Controller: fw.opts.Controller, Order: fw.reader.served().String(), Position: fw.pos.Created,
		PositionIDs: append([]string(nil), fw.pos.IDs...), Ahead: fw.pos.datedAfter(fw.clock()), StreamSeq: fw.out.seq, Subject: fw.out.filter}
	fw.obs.status(&s)
	s.NATS = fw.out.stream.conn.Status()
	return s
}

// status fills in what the observer knows of s.
func (o *observer) status(s *Status) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s.Backlog, s.HeldBack, s.LastAcked = o.backlog, o.held, o.lastAcked
	s.Duplicates, s.Gaps, s.GapEpisodes, s.LastGap = o.dups, o.gaps.lost, o.gaps.episodes, o.gaps.last
	st := &o.stream
	s.Conflicts, s.PositionAdoptions, s.Fenced, s.Rewinds, s.LastRewind, s.Republished = st.conflicts, st.adoptions, st.fenced, st.rewinds, st.lastRewind, st.republished
	s.LastError, s.NotReady, s.Stopped = o.run.lastErr, o.notReady(), o.run.stopped
	s.Recent = o.recent.newestFirst()
	for _, n := range o.published {
		s.Published += n
	}
	s.Rejected = make(map[string]uint64, len(o.rejected.counts))
	for k, n := range o.rejected.counts {
		s.Rejected[k] = n
	}
	s.RecentRejected = o.rejected.recent.newestFirst()
}

// NotReady says why events are not forwarded now, "" when they are: NATS not connected (with
// its cause), the stream or the position store not set up. (A forwarder stopped because another
// instance owns the position says so in Status.Stopped.)
func (fw *Forwarder) NotReady() string {
	fw.obs.mu.Lock()
	defer fw.obs.mu.Unlock()
	return fw.obs.notReady()
}

// RunStatus reports the last polling cycle as the "events" collector; the daemon turns it into
// the veil_collector_* families.
func (fw *Forwarder) RunStatus() []runstatus.Status {
	o := fw.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	st := runstatus.Status{Collector: "events", Success: o.run.cycleOK, Duration: o.run.cycleDur, LastSuccess: o.run.lastOK}
	if !o.run.cycleOK {
		st.Error = o.run.lastErr
	}
	return []runstatus.Status{st}
}

// Describe implements prometheus.Collector.
func (fw *Forwarder) Describe(ch chan<- *prometheus.Desc) {
	d := fw.obs.descs
	for _, x := range []*prometheus.Desc{d.published, d.rejected, d.pubErrors, d.dups, d.gaps, d.episodes, d.conflicts, d.adoptions, d.rewinds, d.republished, d.newestCreated, d.backlog, d.ahead, d.held, d.natsUp} {
		ch <- x
	}
}

// Collect implements prometheus.Collector with const metrics, so concurrent scrapes are safe.
func (fw *Forwarder) Collect(ch chan<- prometheus.Metric) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.obs.collect(ch, fw.pos.Created, fw.pos.datedAfter(fw.clock()))
}

// collect sends the metrics of what the observer counts, with the position's created and how
// many events it remembers published ahead of their time.
func (o *observer) collect(ch chan<- prometheus.Metric, created time.Time, ahead int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.descs
	for k, n := range o.published {
		ch <- prometheus.MustNewConstMetric(d.published, prometheus.CounterValue, float64(n), k.typ, k.class)
	}
	for reason, n := range o.rejected.counts {
		ch <- prometheus.MustNewConstMetric(d.rejected, prometheus.CounterValue, float64(n), reason)
	}
	counter := func(desc *prometheus.Desc, n uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n))
	}
	counter(d.pubErrors, o.pubErrors)
	counter(d.dups, o.dups)
	counter(d.gaps, o.gaps.lost)
	counter(d.episodes, o.gaps.episodes)
	counter(d.conflicts, o.stream.conflicts)
	counter(d.adoptions, o.stream.adoptions)
	counter(d.rewinds, o.stream.rewinds)
	counter(d.republished, o.stream.republished)
	ch <- prometheus.MustNewConstMetric(d.newestCreated, prometheus.GaugeValue, metricutil.UnixSeconds(created))
	ch <- prometheus.MustNewConstMetric(d.backlog, prometheus.GaugeValue, float64(o.backlog))
	ch <- prometheus.MustNewConstMetric(d.ahead, prometheus.GaugeValue, float64(ahead))
	ch <- prometheus.MustNewConstMetric(d.held, prometheus.GaugeValue, float64(o.held))
	ch <- prometheus.MustNewConstMetric(d.natsUp, prometheus.GaugeValue, metricutil.Bool(o.conn.Connected()))
}
