// Writer: one controller's keys in the bucket, kept equal to what the inventory learns.

package changefeed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/runstatus"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// Headers of a stored change.
const (
	HeaderChange = "Veil-Change"         // created, updated, deleted
	HeaderFields = "Veil-Changed-Fields" // updated: the top-level keys that changed
	HeaderSource = "Veil-Source"         // push, refresh
)

// Changes and sources as the headers say them.
const (
	Created = "created"
	Updated = "updated"
	Deleted = "deleted"

	SourcePush    = "push"
	SourceRefresh = "refresh"
)

// maxJobs bounds the changes queued while NATS is away; past it the queued pushes are dropped
// and a full listing is asked for once NATS is back.
const maxJobs = 100_000

// Options configures a Writer.
type Options struct {
	Controller string
	Conn       *natsconn.Conn
	Config     config.Inventory
	Replicas   int         // of the bucket when this creates it (at least 1)
	Fence      func() bool // nil: always; false: this replica may no longer write
	// Resync asks the inventory for a full listing (after the bucket was read back).
	Resync func()
	Logger log.Logger
}

// job is a listing of a class (objs, push false) or one pushed object.
type job struct {
	class   string
	objs    []inventory.RawObject
	push    bool
	deleted bool
	gone    map[string]bool // a listing's: ids the push said deleted, queued before it
}

// entry is what the writer knows of a key: the revision it last saw and its value's hash.
type entry struct {
	rev     uint64
	hash    uint64
	deleted bool
}

// Writer keeps one controller's keys in the bucket equal to the inventory.
type Writer struct {
	opts   Options
	logger log.Logger
	outage runstatus.Outage
	prefix string // "<controller>."

	mu     sync.Mutex
	jobs   []job
	resync bool // pushes were dropped: ask for a listing once caught up
	wake   chan struct{}
	stats  stats

	// Run's goroutine only.
	kv       jetstream.KeyValue
	js       jetstream.JetStream
	state    map[string]entry
	missed   map[string]int // keys the last listings of their class lacked, how many in a row
	loadedIn uint64         // the connection's generation + 1 when state was read back (0: not)
}

type stats struct {
	writes    map[string]float64 // by change
	errors    float64
	conflicts float64
	dropped   float64
	keys      int
	lastWrite time.Time
	lastErr   string
	loaded    bool
}

// New returns the writer of one controller; Run starts it.
func New(opts Options) (*Writer, error) {
	if opts.Conn == nil {
		return nil, errors.New("changefeed: no NATS connection")
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	if opts.Resync == nil {
		opts.Resync = func() {}
	}
	w := &Writer{
		opts: opts, prefix: opts.Controller + ".", wake: make(chan struct{}, 1),
		logger: log.With(opts.Logger, "controller", opts.Controller, "component", "inventory_kv"),
		stats:  stats{writes: map[string]float64{}},
	}
	w.outage.Logger, w.outage.Remind = w.logger, 5*time.Minute
	return w, nil
}

// Listed implements inventory.Observer: a listing supersedes the queued changes of its class.
func (w *Writer) Listed(class string, objs []inventory.RawObject) {
	w.mu.Lock()
	l := job{class: class, objs: objs}
	w.jobs = slices.DeleteFunc(w.jobs, func(j job) bool {
		if j.class != class {
			return false
		}
		// A pushed deletion it supersedes still counts: the listing lacks the object, and
		// one listing alone would not delete it.
		for id := range j.gone {
			l.gone = setOf(l.gone, id)
		}
		if j.push && j.deleted {
			l.gone = setOf(l.gone, j.objs[0].ID)
		}
		return true
	})
	w.jobs = append(w.jobs, l)
	w.mu.Unlock()
	w.kick()
}

// Pushed implements inventory.Observer.
func (w *Writer) Pushed(class string, obj inventory.RawObject, deleted bool) {
	w.mu.Lock()
	if len(w.jobs) >= maxJobs {
		n := len(w.jobs)
		w.jobs = slices.DeleteFunc(w.jobs, func(j job) bool { return j.push })
		w.stats.dropped += float64(n - len(w.jobs))
		w.resync = true
	}
	w.jobs = append(w.jobs, job{class: class, objs: []inventory.RawObject{obj}, push: true, deleted: deleted})
	w.mu.Unlock()
	w.kick()
}

func setOf(m map[string]bool, id string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[id] = true
	return m
}

func (w *Writer) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run writes until ctx is done.
func (w *Writer) Run(ctx context.Context) {
	backoff := time.Second
	tick := time.NewTicker(time.Second) // notices a reconnect, which must read the bucket back
	defer tick.Stop()
	for ctx.Err() == nil {
		err := w.step(ctx)
		if err == nil {
			backoff = time.Second
			continue
		}
		if errors.Is(err, errIdle) {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-tick.C:
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errFenced) {
			// Not a failure of the bucket: wait for the renewal without backing off.
			for !w.opts.Fence() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(fencePoll):
				}
			}
			continue
		}
		w.failed(err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 15*time.Second)
	}
}

// errFenced: the lease ran out; the changes wait until a renewal regains it (or the daemon
// stops the writer: another replica runs the controller).
var errFenced = errors.New("this replica no longer holds the controller's lease")

// fencePoll is how often a writer whose lease ran out looks whether it was renewed.
const fencePoll = 50 * time.Millisecond

// errIdle: nothing to write.
var errIdle = errors.New("idle")

// errStale: the bucket changed in a way the writer's view does not explain: read it back.
var errStale = errors.New("the bucket changed under the writer")

// step reads the bucket back if needed, then writes the first queued job.
func (w *Writer) step(ctx context.Context) error {
	if err := w.load(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	if len(w.jobs) == 0 {
		resync := w.resync
		w.resync = false
		w.mu.Unlock()
		if resync {
			w.opts.Resync()
		}
		return errIdle
	}
	j := w.jobs[0]
	w.mu.Unlock()
	if err := w.write(ctx, j); err != nil {
		if isConflict(err) || errors.Is(err, errStale) {
			w.mu.Lock()
			w.stats.conflicts++
			w.mu.Unlock()
			level.Warn(w.logger).Log("msg", "the bucket changed under this writer (another replica or an operator wrote): reading it back", "err", err)
			w.loadedIn = 0
		}
		return err
	}
	w.mu.Lock()
	if len(w.jobs) > 0 && sameJob(w.jobs[0], j) {
		w.jobs = w.jobs[1:]
	}
	w.mu.Unlock()
	w.outage.Recover(time.Now(), "inventory bucket written again")
	return nil
}

// sameJob says the head of the queue is still j (a listing may have replaced it meanwhile).
func sameJob(a, b job) bool {
	return a.class == b.class && a.push == b.push && len(a.objs) == len(b.objs) && (len(a.objs) == 0 || &a.objs[0] == &b.objs[0])
}

func (w *Writer) failed(err error) {
	w.mu.Lock()
	w.stats.errors++
	w.stats.lastErr = err.Error()
	w.mu.Unlock()
	w.outage.Fail(time.Now(), level.Warn, "couldn't write the inventory bucket; retrying (the changes wait, coalesced)", err, "bucket", w.opts.Config.Bucket)
}

// load creates or checks the bucket and reads the controller's keys back once per generation of
// the connection (a reconnect may reach a server that lost writes), then asks for a listing.
func (w *Writer) load(ctx context.Context) error {
	c := w.opts.Conn
	if !c.Connected() {
		return c.NotConnected()
	}
	gen := c.Generation() + 1
	if w.loadedIn == gen {
		return nil
	}
	if w.js == nil {
		js, err := c.JetStream()
		if err != nil {
			return err
		}
		w.js = js
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// An existing bucket is used as it is: an operator's replicas and limits are kept.
	kv, err := w.js.KeyValue(cctx, w.opts.Config.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = w.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{
			Bucket: w.opts.Config.Bucket, History: uint8(w.opts.Config.History), Replicas: max(w.opts.Replicas, 1),
			Description: "veil-exporter: the inventory of the controllers, <controller>.<class>.<id>",
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another writer made it meanwhile
			kv, err = w.js.KeyValue(cctx, w.opts.Config.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("couldn't create or open bucket %s: %w", w.opts.Config.Bucket, err)
	}
	state, err := readBack(cctx, kv, w.prefix+">")
	if err != nil {
		return fmt.Errorf("couldn't read bucket %s back: %w", w.opts.Config.Bucket, err)
	}
	w.kv, w.state, w.loadedIn = kv, state, gen
	if w.missed == nil {
		w.missed = map[string]int{}
	}
	keys := live(state)
	w.mu.Lock()
	again := w.stats.loaded
	w.stats.loaded, w.stats.keys = true, keys
	w.mu.Unlock()
	level.Info(w.logger).Log("msg", "inventory bucket read back", "bucket", w.opts.Config.Bucket, "keys", keys)
	if again {
		// What was written since the last read may be lost (a fresh server) or another
		// replica's: list the inventory to write what differs. The first time, the inventory's
		// own first listing does it.
		w.opts.Resync()
	}
	return nil
}

// readBack reads the latest value of every key under filter: its revision and hash.
func readBack(ctx context.Context, kv jetstream.KeyValue, filter string) (map[string]entry, error) {
	wt, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, err
	}
	defer wt.Stop()
	state := map[string]entry{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-wt.Updates():
			if !ok {
				return nil, errors.New("watch ended")
			}
			if e == nil { // every current value was delivered
				return state, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				state[e.Key()] = entry{rev: e.Revision(), deleted: true}
				continue
			}
			state[e.Key()] = entry{rev: e.Revision(), hash: hash(e.Value())}
		}
	}
}

func live(state map[string]entry) int {
	n := 0
	for _, e := range state {
		if !e.deleted {
			n++
		}
	}
	return n
}

// write writes what j changes: each object that differs, and for a listing the deletion of the
// keys of its class that it lacks.
func (w *Writer) write(ctx context.Context, j job) error {
	source := SourceRefresh
	if j.push {
		source = SourcePush
	}
	if j.push && j.deleted {
		return w.remove(ctx, w.key(j.class, j.objs[0].ID), source)
	}
	for _, o := range j.objs {
		if err := w.put(ctx, j.class, o, source); err != nil {
			return err
		}
	}
	if j.push {
		return nil
	}
	listed := make(map[string]bool, len(j.objs))
	for _, o := range j.objs {
		listed[w.key(j.class, o.ID)] = true
	}
	// A listing can miss an object that was there all along (deletions before it shifted it
	// onto a page already read): an object is deleted when two listings in a row lack it, or
	// one does and the push said it was deleted.
	of := w.prefix + j.class + "."
	var gone []string
	for k, e := range w.state {
		if !strings.HasPrefix(k, of) || e.deleted {
			continue
		}
		if listed[k] {
			delete(w.missed, k)
			continue
		}
		if w.missed[k]++; w.missed[k] >= 2 || j.gone[strings.TrimPrefix(k, of)] {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	for _, k := range gone {
		if err := w.remove(ctx, k, source); err != nil {
			return err
		}
		delete(w.missed, k)
	}
	return nil
}

func (w *Writer) key(class, id string) string { return w.prefix + class + "." + id }

// put writes one object if its value differs from the bucket's.
func (w *Writer) put(ctx context.Context, class string, o inventory.RawObject, source string) error {
	if o.ID == "" || !validKeyToken(o.ID) {
		return nil // no key can name it; the inventory dropped it too
	}
	val, err := canonical(o.JSON)
	if err != nil {
		return nil // not an object: never written, never retried
	}
	key := w.key(class, o.ID)
	h := hash(val)
	e, known := w.state[key]
	if known && !e.deleted && e.hash == h {
		return nil
	}
	m := nats.NewMsg("$KV." + w.opts.Config.Bucket + "." + key)
	m.Data = val
	change := Created
	if known && !e.deleted {
		change = Updated
		fields, err := w.changedFields(ctx, key, val)
		if err != nil {
			return err
		}
		m.Header.Set(HeaderFields, fields)
	}
	m.Header.Set(HeaderChange, change)
	m.Header.Set(HeaderSource, source)
	rev, err := w.publish(ctx, m, e.rev)
	if err != nil {
		return err
	}
	w.state[key] = entry{rev: rev, hash: h}
	w.wrote(change)
	return nil
}

// remove deletes a key the bucket holds.
func (w *Writer) remove(ctx context.Context, key, source string) error {
	e, known := w.state[key]
	if !known || e.deleted {
		return nil
	}
	m := nats.NewMsg("$KV." + w.opts.Config.Bucket + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	m.Header.Set(HeaderChange, Deleted)
	m.Header.Set(HeaderSource, source)
	rev, err := w.publish(ctx, m, e.rev)
	if err != nil {
		return err
	}
	w.state[key] = entry{rev: rev, deleted: true}
	w.wrote(Deleted)
	return nil
}

// publish stores m if the key's last revision is still rev (0: the key never held anything).
func (w *Writer) publish(ctx context.Context, m *nats.Msg, rev uint64) (uint64, error) {
	if f := w.opts.Fence; f != nil && !f() {
		return 0, errFenced
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := w.js.PublishMsg(pctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// wrote counts a change; a creation adds a live key, a deletion takes one (the keys are
// counted once, when the bucket is read back: not again at every write).
func (w *Writer) wrote(change string) {
	w.mu.Lock()
	w.stats.writes[change]++
	w.stats.lastWrite = time.Now()
	switch change {
	case Created:
		w.stats.keys++
	case Deleted:
		w.stats.keys--
	}
	w.mu.Unlock()
}

// changedFields names the top-level keys whose values differ between the bucket's value of key
// and val (both canonical), sorted and comma-separated.
func (w *Writer) changedFields(ctx context.Context, key string, val []byte) (string, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	old, err := w.kv.Get(gctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		// Deleted or purged behind this writer's back (an operator's nats kv del): its view
		// is stale; read the bucket back.
		return "", fmt.Errorf("%s changed behind the writer: %w", key, errStale)
	}
	if err != nil {
		return "", fmt.Errorf("couldn't read %s: %w", key, err)
	}
	var a, b map[string]json.RawMessage
	if json.Unmarshal(old.Value(), &a) != nil || json.Unmarshal(val, &b) != nil {
		return "", nil
	}
	var changed []string
	for k, v := range b {
		if ov, ok := a[k]; !ok || !bytes.Equal(ov, v) {
			changed = append(changed, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	return strings.Join(changed, ","), nil
}

func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// canonical is the object's JSON with the keys of every object sorted and numbers as written;
// not an object: an error.
func canonical(b []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

func hash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// validKeyToken says whether s can be a part of a key ([-_=A-Za-z0-9]).
func validKeyToken(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=') {
			return false
		}
	}
	return true
}
