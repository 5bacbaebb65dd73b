package e2e

// The durability suite's partitions: a Partitionable three-node cluster (internal/testutil's
// partition.go), whose routes and whose client connections through ClientURLs pass links the
// row cuts and heals. A cut closes the connections through a link and turns new ones away: a
// partition both sides notice at once. Every row asserts that its partition took effect (the
// nodes' own /routez, the exporter's log and metrics, the leaders the cluster elects), so that a
// cut that cuts nothing cannot pass, and ends with the checker like every other row.
//
// In a NATS cluster a client reaches a stream's leader through the server it is connected to:
// "the forwarder cut from the stream leader" is the forwarder reaching only a server that has no
// route to the leader's, and the forwarder without a link to the leader's server either.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// positionsBucket is the nats_kv position store's bucket (forwarder.PositionsBucket), created
// here R3 as an operator would: the exporter creates it R1 without HA.
const positionsBucket = "VEIL_EXPORTER_POSITIONS"

func partitionRows() []durabilityRow {
	return []durabilityRow{
		{name: "stream leader cut, KV reachable", what: "the forwarder reaches only the KV leader's node, whose routes to the stream leader's are cut", partition: true, run: streamLeaderCut},
		{name: "KV leader cut, stream reachable", what: "the forwarder reaches only the stream leader's node, whose routes to the KV leader's are cut", partition: true, run: kvLeaderCut},
		{name: "majority cut off", what: "the forwarder reaches only the stream leader's node, cut from the two others", partition: true, run: majorityCut},
		{name: "minority cut off", what: "the stream leader's node, the forwarder's, cut from the others and from the forwarder", partition: true, run: minorityCut},
	}
}

// leaderSeenBy is the leader of stream as node n's server tells it ("" when n cannot tell:
// n reaches no leader).
func (w *durabilityWorld) leaderSeenBy(n *testutil.NATS, stream string) string {
	if w.nodeJS == nil {
		w.nodeJS = map[*testutil.NATS]jetstream.JetStream{}
	}
	js, ok := w.nodeJS[n]
	if !ok {
		js = testutil.JetStream(w.t, n.URL())
		w.nodeJS[n] = js
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// streamLenSeenBy is the stream's length as node n's server tells it.
func (w *durabilityWorld) streamLenSeenBy(n *testutil.NATS) (int, error) {
	w.leaderSeenBy(n, faultStream) // opens n's client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := w.nodeJS[n].Stream(ctx, faultStream)
	if err != nil {
		return 0, err
	}
	return int(s.CachedInfo().State.Msgs), nil
}

// lead makes n the leader of stream (a stepdown naming n preferred) and waits until it is.
func (w *durabilityWorld) lead(stream string, n *testutil.NATS) {
	w.t.Helper()
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": n.Name()}})
	testutil.EventuallyNil(w.t, 60*time.Second, func() error {
		l := w.leaderSeenBy(n, stream)
		if l == n.Name() {
			return nil
		}
		if l != "" {
			_, _ = w.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, body, 2*time.Second)
		}
		return fmt.Errorf("its leader is %q", l)
	}, "%s to lead %s", n.Name(), stream)
}

// partitionSetup creates the stream and the positions bucket R3, places the stream's leader on
// streamLeader and the bucket's on kvLeader, and lets the exporter reach only the nodes in
// reach (the other client links cut). It returns the exporter, started and caught up.
func (w *durabilityWorld) partitionSetup(streamLeader, kvLeader *testutil.NATS, reach ...*testutil.NATS) *replicaProc {
	w.t.Helper()
	w.createStream(0, 3)
	testutil.EventuallyNil(w.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := w.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: positionsBucket, Storage: jetstream.FileStorage, Replicas: 3})
		return err
	}, "bucket %s to be created", positionsBucket)
	w.lead(faultStream, streamLeader)
	w.lead("KV_"+positionsBucket, kvLeader)
	for _, n := range w.cluster.Nodes {
		if !slices.Contains(reach, n) {
			w.cluster.ClientLink(n).Cut()
		}
	}
	p := w.exporter("exporter", exporterOpts{})
	p.start()
	w.caughtUp()
	return p
}

// routesAre waits until n's server holds routes to exactly the nodes named (sorted), as its own
// /routez tells.
func (w *durabilityWorld) routesAre(n *testutil.NATS, want ...string) {
	w.t.Helper()
	testutil.EventuallyNil(w.t, 30*time.Second, func() error {
		got, err := w.cluster.Routes(n)
		if err == nil && !slices.Equal(got, want) {
			err = fmt.Errorf("routes to %v", got)
		}
		return err
	}, "%s to hold routes to %v", n.Name(), want)
}

// failedSince waits until the exporter logs, after mark, that forwarding failed.
func (w *durabilityWorld) failedSince(p *replicaProc, mark int, what string) {
	w.t.Helper()
	testutil.Eventually(w.t, 60*time.Second, func() bool {
		return strings.Contains(logFrom(w.t, p.logPath, mark), "event forwarding failed")
	}, "the exporter to log a forwarding failure (%s)", what)
}

// healed heals every link, waits until every node holds routes to both others, and ends the
// fault: the round ends when the forwarder says it recovered.
func (w *durabilityWorld) healed(p *replicaProc, mark int, h *history) {
	w.t.Helper()
	w.cluster.HealAll()
	h.ended = time.Now()
	h.faults++
	for i, n := range w.cluster.Nodes {
		var others []string
		for j, o := range w.cluster.Nodes {
			if j != i {
				others = append(others, o.Name())
			}
		}
		w.routesAre(n, others...)
	}
	testutil.Eventually(w.t, 60*time.Second, func() bool {
		return strings.Contains(logFrom(w.t, p.logPath, mark), "event forwarding recovered")
	}, "the forwarder to say it recovered")
	w.caughtUp()
}

// streamLeaderCut: the forwarder reaches only n1, which leads the positions bucket; n1's routes
// to n0, the stream's leader, are cut (n2 keeps its routes to both). The forwarder's publishes
// find no stream leader through n1 until the cluster elects one n1 reaches (n1 and n2 are a
// quorum of the stream's group) or the cut heals.
func streamLeaderCut(w *durabilityWorld) history {
	return leadersCut(w, 1, "n1 cut from the stream leader n0")
}

// kvLeaderCut: the reverse. The forwarder reaches only n0, which leads the stream; n0's routes
// to n1, the positions bucket's leader, are cut. The forwarder publishes, but cannot store its
// position until the bucket has a leader n0 reaches or the cut heals.
func kvLeaderCut(w *durabilityWorld) history {
	return leadersCut(w, 0, "n0 cut from the bucket's leader n1")
}

// leadersCut cuts the routes between n0, the stream's leader, and n1, the positions bucket's,
// with the forwarder reaching only node at, once per round; why names the fault in the log check.
func leadersCut(w *durabilityWorld, at int, why string) history {
	var h history
	n := w.cluster.Nodes
	p := w.partitionSetup(n[0], n[1], n[at])
	for range w.rounds {
		w.lead(faultStream, n[0])
		w.lead("KV_"+positionsBucket, n[1])
		w.caughtUp()
		mark := logSize(w.t, p.logPath)
		w.cluster.Cut(n[0], n[1])
		w.routesAre(n[0], "n2")
		w.routesAre(n[1], "n2")
		w.addEvents(50)
		w.failedSince(p, mark, why)
		w.healed(p, mark, &h)
	}
	h.tally(p)
	return h
}

// minorityCut: the forwarder is connected to n0, the stream's leader; n0 is cut from both other
// nodes and from the forwarder. The majority (n1, n2) elects a leader, the forwarder reconnects
// to it and publishes while n0 is cut off.
func minorityCut(w *durabilityWorld) history {
	var h history
	n := w.cluster.Nodes
	p := w.partitionSetup(n[0], n[1], n[0])
	for range w.rounds {
		w.caughtUp()
		w.lead(faultStream, n[0])
		// The forwarder is connected to n0 (the only link open); now it may reach the others.
		testutil.Eventually(w.t, 30*time.Second, func() bool { return w.cluster.ClientLink(n[0]).Open() > 0 },
			"the forwarder connected to n0")
		w.cluster.ClientLink(n[1]).Heal()
		w.cluster.ClientLink(n[2]).Heal()
		w.cluster.ClientLink(n[0]).Cut()
		before := w.isolateLeader()
		w.addEvents(50)
		testutil.EventuallyNil(w.t, 60*time.Second, func() error {
			m, err := w.streamLenSeenBy(n[1])
			if err == nil && m <= before {
				err = fmt.Errorf("still %d messages", m)
			}
			return err
		}, "the forwarder to publish to the majority while n0 is cut off")
		w.cluster.HealAll()
		h.ended = time.Now()
		h.faults++
		w.routesAre(n[0], "n1", "n2")
		// Back to the round's start: only n0's link open.
		w.cluster.ClientLink(n[1]).Cut()
		w.cluster.ClientLink(n[2]).Cut()
	}
	w.cluster.HealAll()
	w.caughtUp()
	h.tally(p)
	return h
}

// isolateLeader cuts n0, the stream's leader, from n1 and n2, waits until they elect a leader
// of their own, and returns how many messages their stream holds then.
func (w *durabilityWorld) isolateLeader() int {
	n := w.cluster.Nodes
	w.cluster.Isolate(n[0])
	w.routesAre(n[0])
	w.routesAre(n[1], "n2")
	testutil.Eventually(w.t, 60*time.Second, func() bool {
		l := w.leaderSeenBy(n[1], faultStream)
		return l == "n1" || l == "n2"
	}, "the majority to elect a stream leader")
	before, err := w.streamLenSeenBy(n[1])
	if err != nil {
		w.t.Fatal(err)
	}
	return before
}

// majorityCut: the forwarder reaches only n0, the stream's leader; n0 is cut from both other
// nodes. The forwarder is with the minority: nothing it sends can be stored (the majority's
// stream does not grow) until the cut heals.
func majorityCut(w *durabilityWorld) history {
	var h history
	n := w.cluster.Nodes
	p := w.partitionSetup(n[0], n[1], n[0])
	for range w.rounds {
		w.caughtUp()
		w.lead(faultStream, n[0])
		mark := logSize(w.t, p.logPath)
		before := w.isolateLeader()
		w.addEvents(50)
		w.failedSince(p, mark, "the forwarder with the minority")
		after, err := w.streamLenSeenBy(n[1])
		if err != nil {
			w.t.Fatal(err)
		}
		if after != before {
			w.t.Errorf("the majority's stream grew from %d to %d while the forwarder reached only n0, cut off", before, after)
		}
		w.healed(p, mark, &h)
	}
	h.tally(p)
	return h
}
