package forwarder

// The property test's stream and stored position (position_property_test.go): the stream keeps
// every message and enforces the publish expectation as the stream leader does, and may answer a
// read back from an older prefix of itself, as a node not caught up does; the stored position is
// JSON in memory, as the file store keeps it.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
)

// propStream is the stream: every message stored, in order, checked against the expectation
// the real stream enforces. It also reads messages back as the stream leader does.
type propStream struct {
	mu   sync.Mutex
	msgs []storedMsg
	fail int // per mille of batches refused (a prefix of the batch stored)
	// stale is the per mille of reads (last, from) answered by a replica that is not caught up:
	// it holds only a prefix of the stream. Right after a partition heals, the node that led the
	// stream before the cut may still answer as its leader for a moment, with what it held then.
	stale     int
	staleLast map[uint64]bool // the sequences a stale replica gave as the newest (last)
	rng       *rand.Rand
	errs      []string
}

func (s *propStream) publish(_ context.Context, msgs []*nats.Msg, expect uint64) (int, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last := uint64(len(s.msgs)); expect != last {
		if s.staleLast[expect] {
			// The position came from a replica not caught up: the stream leader refuses the
			// expectation, as NATS does, and the forwarder reads the position again.
			return 0, 0, fmt.Errorf("%w: wrong last sequence", errConflict)
		}
		s.errs = append(s.errs, fmt.Sprintf("publish expects %d, the stream's newest is %d", expect, last))
		return 0, 0, fmt.Errorf("%w: wrong last sequence", errConflict)
	}
	n := len(msgs)
	var err error
	if s.rng.IntN(1000) < s.fail {
		n, err = s.rng.IntN(len(msgs)), fmt.Errorf("publish not acknowledged: injected")
	}
	for _, m := range msgs[:n] {
		h := nats.Header{}
		for k, v := range m.Header {
			h[k] = slices.Clone(v)
		}
		s.msgs = append(s.msgs, storedMsg{seq: uint64(len(s.msgs) + 1), header: h, data: slices.Clone(m.Data)})
	}
	return n, uint64(len(s.msgs)), err
}

func (s *propStream) last(context.Context) (*storedMsg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := len(s.msgs)
	if held > 0 && s.rng.IntN(1000) < s.stale {
		held = s.rng.IntN(held)
		if s.staleLast == nil {
			s.staleLast = map[uint64]bool{}
		}
		s.staleLast[uint64(held)] = true
	}
	if held == 0 {
		return nil, nil
	}
	m := s.msgs[held-1]
	return &m, nil
}

func (s *propStream) from(_ context.Context, seq uint64) (*storedMsg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq == 0 {
		seq = 1
	}
	held := uint64(len(s.msgs))
	if held > 0 && s.rng.IntN(1000) < s.stale {
		held = s.rng.Uint64N(held)
	}
	if seq > held {
		return nil, nil
	}
	m := s.msgs[seq-1]
	return &m, nil
}

// memCheckpoint stores the position as the file store does: JSON.
type memCheckpoint struct {
	mu sync.Mutex
	b  []byte
}

func (c *memCheckpoint) Load(context.Context) (position, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p position
	if c.b == nil {
		return p, false, nil
	}
	err := json.Unmarshal(c.b, &p)
	return p, true, err
}

func (c *memCheckpoint) Save(_ context.Context, p position) error {
	b, err := json.Marshal(p)
	c.mu.Lock()
	c.b = b
	c.mu.Unlock()
	return err
}
