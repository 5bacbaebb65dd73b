package forwarder

// Publishing one event: its message (subject, CloudEvents headers, the headers that resume from
// it, a body bounded to what NATS takes), and the publishers that store a batch on the stream in
// order (JetStream, with the expectation the stream leader enforces) or send it (core NATS).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/veil-exporter/veil-exporter/veil"
)

// sanitizeToken makes s one NATS subject token (README: Events): no dot, space, * or >, and no
// control character (the server ends a connection over a subject it cannot parse).
func sanitizeToken(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, s)
}

// maxTokenBytes bounds a subject token taken from the controller's data (an event's type or its
// entity's class). NATS ends the connection of a client whose protocol line passes its
// max_control_line (4 KiB by default): one event with a long type must not do that.
const maxTokenBytes = 64

// subjectToken is sanitizeToken bounded to maxTokenBytes (cutHashed). It reports whether it cut.
func subjectToken(s string) (string, bool) {
	t := sanitizeToken(s)
	if len(t) <= maxTokenBytes {
		return t, false
	}
	return cutHashed(t, s, maxTokenBytes), true
}

// maxAttrBytes bounds a CloudEvents attribute taken from the controller's data (ce-type,
// ce-subject): the whole value stays in the body.
const maxAttrBytes = 256

// boundAttr cuts s to maxAttrBytes (cutHashed).
func boundAttr(s string) string {
	if len(s) <= maxAttrBytes {
		return s
	}
	return cutHashed(s, s, maxAttrBytes)
}

// cutHashed cuts t (the text of whole, or whole itself) to n bytes at a character boundary,
// ending in '-' and 8 hex digits of whole's SHA-256, so that distinct long values stay distinct.
func cutHashed(t, whole string, n int) string {
	sum := sha256.Sum256([]byte(whole))
	cut := n - 9
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut] + "-" + hex.EncodeToString(sum[:4])
}

// Headers of an event that could not be published as the controller sent it (README: "Events
// that cannot be published as they are").
const (
	// hdrRejected names why: too_large, long_token, no_id, bad_created, not_an_object.
	hdrRejected = "Veil-Rejected"
	// hdrOriginalSize is the size in bytes of the body as read, when it was cut.
	hdrOriginalSize = "Veil-Original-Size"
	// hdrCutFields lists the body's fields that were cut or left out, largest first.
	hdrCutFields = "Veil-Cut-Fields"
)

// invalidToken is the subject token (in place of <type>.<entity_class>) of events that could not
// be read as events: <prefix>.<controller>.invalid, under the controller's filter.
const invalidToken = "invalid"

// envelope is what the messages of one read share besides their events: the subject prefix, the
// controller's name and ce-source (its URL without userinfo), the order the journal is read in
// and the largest message NATS takes (0: not known, no limit).
type envelope struct {
	prefix, controller, source string
	order                      direction
	limit                      int
}

// message builds the NATS message of one event: subject, CloudEvents binary headers, the headers
// that resume from it (pos: the position with this event added), the body (raw, or cut to fit
// env.limit bytes with headers). The header map is sized once for every header the publish adds
// (position, expectation, batch): this runs for every event of a catch-up. It returns why the
// event could not go out as it is ("" when it could).
func (env *envelope) message(e *veil.Event, pos *position) (*nats.Msg, string) {
	prefix, controller, limit := env.prefix, env.controller, env.limit
	class := "none"
	subject := ""
	if len(e.Entities) > 0 {
		class, subject = e.Entities[0].Class, e.Entities[0].UUID
	}
	id := controller + "." + e.ID
	ceTime := ""
	if !e.Created.IsZero() {
		ceTime = e.Created.UTC().Format(time.RFC3339Nano)
	}
	v := [...]string{id, "application/json", "1.0", ceHeader(id), ceHeader(env.source), ceHeader(boundAttr(prefix + "." + e.Type)), ceTime, ceHeader(boundAttr(subject)), "application/json"}
	vals := v[:]
	h := make(nats.Header, len(v)+11)
	for i, k := range [...]string{nats.MsgIdHdr, "Content-Type", "ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time", "ce-subject", "ce-datacontenttype"} {
		if vals[i] != "" || (k != "ce-subject" && k != "ce-time") {
			h[k] = vals[i : i+1 : i+1]
		}
	}
	positionHeaders(h, pos, env.order)
	reason := e.Invalid
	var tail string
	if reason != "" {
		tail = invalidToken
	} else {
		typ, cutType := subjectToken(e.Type)
		cls, cutClass := subjectToken(class)
		tail = typ + "." + cls
		if cutType || cutClass {
			reason = rejectLongToken
		}
	}
	data := []byte(e.Raw)
	if limit > 0 {
		if budget := limit - headerBytes(h) - publishHeaderReserve; len(data) > budget {
			var cut []string
			data, cut = boundBody(data, max(budget, minBodyBudget))
			h[hdrOriginalSize] = []string{strconv.Itoa(len(e.Raw))}
			h[hdrCutFields] = []string{strings.Join(cut, ",")}
			if reason == "" {
				reason = rejectTooLarge
			}
		}
	}
	if reason != "" {
		h[hdrRejected] = []string{reason}
	}
	return &nats.Msg{
		Subject: prefix + "." + sanitizeToken(controller) + "." + tail,
		Header:  h,
		Data:    data,
	}, reason
}

// Reasons of veil_events_rejected_total.
const (
	rejectTooLarge  = "too_large"
	rejectLongToken = "long_token"
)

// publishHeaderReserve is what the publish adds to a message's headers after message built it
// (the expectation, the atomic batch's headers, the instant's first sequence), with room to spare.
const publishHeaderReserve = 512

// minBodyBudget is the least a cut body is given, whatever the headers take.
const minBodyBudget = 1024

// headerBytes is the size of h on the wire: "NATS/1.0\r\n", a "key: value\r\n" line per value
// and the closing "\r\n".
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// boundBody makes an event's body fit budget bytes while staying the same JSON object: the
// largest field is cut (a string to what fits, with "…" at its end) or left out (any other value),
// then the next largest, until it fits; id, type and created are never left out. It returns the
// body and the names of the fields cut. A body that is not an object becomes {}.
func boundBody(raw []byte, budget int) ([]byte, []string) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return []byte("{}"), []string{"(not an object)"}
	}
	var cut []string
	out := marshalPlain(obj) // sizes are those of the output: escapes and invalid UTF-8 change them
	for over := len(out) - budget; over > 0; over = len(out) - budget {
		key, largest := "", -1
		for k, v := range obj {
			if len(v) > largest && !(len(v) <= 64 && keepField(k)) {
				key, largest = k, len(v)
			}
		}
		if largest < 0 { // only what is kept whole is left ("" is a key like any other)
			break
		}
		v := obj[key]
		var s string
		if v[0] == '"' && json.Unmarshal(v, &s) == nil && len(v)-over > 16 {
			// Encoded and decoded lengths differ (escapes): keep the share of the text that the
			// encoded value may keep, and always less than all of it.
			keep := min(len(s)*(len(v)-over-16)/len(v), len(s)-1)
			for keep > 0 && !utf8.RuneStart(s[keep]) {
				keep--
			}
			if cutV := marshalPlain(s[:max(keep, 0)] + "…"); len(cutV) < len(v) {
				obj[key] = cutV
			} else {
				delete(obj, key)
			}
		} else if keepField(key) {
			obj[key] = json.RawMessage(`""`)
		} else {
			delete(obj, key)
		}
		cut = append(cut, key)
		out = marshalPlain(obj)
	}
	return out, cut
}

// marshalPlain is json.Marshal without HTML escaping (which would grow what was just cut).
func marshalPlain(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings and raw values: cannot fail
	return bytes.TrimRight(b.Bytes(), "\n")
}

// keepField says whether boundBody keeps a field, cut, rather than leave it out.
func keepField(k string) bool {
	return strings.EqualFold(k, "id") || strings.EqualFold(k, "type") || strings.EqualFold(k, "created")
}

// ceHeader percent-encodes a CloudEvents attribute value as the NATS protocol binding asks (as
// HTTP's does): space, '"', '%' and every byte outside printable ASCII. Values that need none,
// nearly all, are returned as they are.
func ceHeader(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// eventSource is the controller URL without userinfo, for ce-source: a URL written as
// https://user:pass@host must not hand its credentials to every subscriber of the stream. The
// rest stays byte for byte as configured, and a URL that does not parse is cut the same way
// (config rejects those, but nothing here may echo a password).
func eventSource(controllerURL string) string {
	start := 0
	if i := strings.Index(controllerURL, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(controllerURL)
	if i := strings.IndexAny(controllerURL[start:], "/?#"); i >= 0 {
		end = start + i
	}
	if at := strings.LastIndexByte(controllerURL[start:end], '@'); at >= 0 {
		return controllerURL[:start] + controllerURL[start+at+1:]
	}
	return controllerURL
}

// publisher stores a batch on the stream in order, right after the controller's message with
// sequence expect (0: the stream holds none of it): it returns how many leading messages are
// stored and the stream sequence of the last of them.
type publisher interface {
	publish(ctx context.Context, msgs []*nats.Msg, expect uint64) (n int, last uint64, err error)
}

// errConflict is the stream refusing a publish because its newest message of the controller is
// not the one expected (another replica published, or the stream lost or holds more than we
// thought): the position is read again from the stream.
var errConflict = errors.New("the stream refused the publish: its newest message of this controller is not the expected one")

// apiError is a JetStream error answer.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (error %d)", e.Description, e.ErrCode) }

// JetStream error codes the forwarder acts on.
const (
	errCodeWrongLastSeq      = 10071
	errCodeWrongLastSeqConst = 10164
	errCodeBatchDuplicate    = 10201
	errCodeAtomicDisabled    = 10174
	errCodeNoMessage         = 10037
)

// jsPublisher publishes to JetStream with the expectation the stream leader enforces: an atomic
// batch whose first message expects the controller's last sequence (one round trip per batch),
// or, on a stream without allow_atomic, one message at a time, each expecting the one before.
type jsPublisher struct {
	stream  *Stream
	filter  string // <prefix>.<controller>.>: the messages the expectation is about
	timeout time.Duration
}

func (p *jsPublisher) publish(ctx context.Context, msgs []*nats.Msg, expect uint64) (int, uint64, error) {
	if len(msgs) == 0 {
		return 0, expect, nil
	}
	var n int
	var last uint64
	var err error
	if p.stream.atomicBatches() {
		n, last, err = p.atomic(ctx, msgs, expect)
		switch {
		case isAPIError(err, errCodeAtomicDisabled):
			p.stream.noAtomic() // turned off on the stream meanwhile: one at a time until set up again
			n, last, err = p.serial(ctx, msgs, expect)
		case isAPIError(err, errCodeBatchDuplicate):
			// The stream's duplicate window knows an event of the batch though the expectation
			// held (its message was deleted since): one at a time, a duplicate is acknowledged as
			// stored and the rest goes on.
			n, last, err = p.serial(ctx, msgs, expect)
		}
	} else {
		n, last, err = p.serial(ctx, msgs, expect)
	}
	if isAPIError(err, errCodeWrongLastSeq) || isAPIError(err, errCodeWrongLastSeqConst) {
		err = fmt.Errorf("%w: %w", errConflict, err)
	}
	return n, last, err
}

// atomic sends msgs as one ADR-50 batch: all stored or none.
func (p *jsPublisher) atomic(ctx context.Context, msgs []*nats.Msg, expect uint64) (int, uint64, error) {
	id := uuid.NewString()
	p.expect(msgs[0].Header, expect)
	nc := p.stream.conn.NATS()
	for i, m := range msgs {
		m.Header[batchIDHdr] = []string{id}
		m.Header[batchSeqHdr] = []string{strconv.Itoa(i + 1)}
		if i == len(msgs)-1 {
			m.Header[batchCommitHdr] = []string{"1"}
			break
		}
		// No reply asked: the commit's answer covers the batch, and a message lost on the way
		// makes the server refuse the commit (a gap in the batch sequence).
		if err := nc.PublishMsg(m); err != nil {
			return 0, 0, fmt.Errorf("couldn't publish: %w", err)
		}
	}
	ack, err := p.request(ctx, msgs[len(msgs)-1])
	if err != nil {
		return 0, 0, err
	}
	return len(msgs), ack.Seq, nil
}

// serial sends one message at a time, each expecting the sequence of the one before.
func (p *jsPublisher) serial(ctx context.Context, msgs []*nats.Msg, expect uint64) (int, uint64, error) {
	for i, m := range msgs {
		delete(m.Header, batchIDHdr) // left by an atomic attempt
		delete(m.Header, batchSeqHdr)
		delete(m.Header, batchCommitHdr)
		p.expect(m.Header, expect)
		ack, err := p.request(ctx, m)
		if err != nil {
			return i, expect, err
		}
		if !ack.Duplicate {
			expect = ack.Seq
		}
	}
	return len(msgs), expect, nil
}

// expect adds the expectation, unless the server is too old to know its subject filter (it
// would check the message's own subject instead): then Nats-Msg-Id alone guards.
func (p *jsPublisher) expect(h nats.Header, seq uint64) {
	if !p.stream.expectations() {
		return
	}
	h[hdrExpectSubjSeq] = []string{strconv.FormatUint(seq, 10)}
	h[hdrExpectSubjFilt] = []string{p.filter}
}

// Atomic batch headers (ADR-50).
const (
	batchIDHdr     = "Nats-Batch-Id"
	batchSeqHdr    = "Nats-Batch-Sequence"
	batchCommitHdr = "Nats-Batch-Commit"
)

type pubAck struct {
	Error     *apiError `json:"error"`
	Stream    string    `json:"stream"`
	Seq       uint64    `json:"seq"`
	Duplicate bool      `json:"duplicate"`
}

// request publishes m and waits for the stream's answer.
func (p *jsPublisher) request(ctx context.Context, m *nats.Msg) (pubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.stream.conn.NATS().RequestMsgWithContext(ctx, m)
	if err != nil {
		return pubAck{}, fmt.Errorf("publish not acknowledged: %w", err)
	}
	var ack pubAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return pubAck{}, fmt.Errorf("publish not acknowledged: couldn't decode the answer: %w", err)
	}
	if e := ack.Error; e != nil {
		return pubAck{}, fmt.Errorf("publish refused: %w", e)
	}
	return ack, nil
}

func isAPIError(err error, code int) bool {
	var e *apiError
	return errors.As(err, &e) && e.ErrCode == code
}

// corePublisher is at-most-once: a flush after the batch is all the confirmation core NATS gives,
// and what left counts as published, confirmed or not, so that nothing is sent twice.
type corePublisher struct {
	nc      *nats.Conn
	timeout time.Duration
}

func (p *corePublisher) publish(ctx context.Context, msgs []*nats.Msg, _ uint64) (int, uint64, error) {
	if !p.nc.IsConnected() {
		return 0, 0, nats.ErrDisconnected
	}
	for i, m := range msgs {
		if err := p.nc.PublishMsg(m); err != nil {
			return i, 0, fmt.Errorf("couldn't publish: %w", err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := p.nc.FlushWithContext(fctx); err != nil {
		return len(msgs), 0, fmt.Errorf("couldn't confirm publishing (core NATS, at most once): %w", err)
	}
	return len(msgs), 0, nil
}
