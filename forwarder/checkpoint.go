package forwarder

// The position store, the fallback of a restart when the stream holds nothing of the controller:
// a file per controller or a key of a JetStream bucket written with compare-and-set, and a fence
// that refuses to save once the lease ended.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/natsconn"
)

// checkpoint stores the position of one controller.
type checkpoint interface {
	// Load returns the stored position and whether there was one.
	Load(ctx context.Context) (position, bool, error)
	// Save stores the position; errCheckpointConflict means another instance moved it.
	Save(ctx context.Context, p position) error
}

// errCheckpointConflict says that another instance wrote the position: this one must stop.
var errCheckpointConflict = errors.New("the position was written by another instance")

// errFenced says that this replica no longer holds the controller's lease: another may run it,
// so nothing more is published or saved here.
var errFenced = errors.New("the lease of this controller ended: another replica may run it")

// fencedCheckpoint refuses to save once the fence says the lease ended.
type fencedCheckpoint struct {
	checkpoint
	held func() bool
}

func (f fencedCheckpoint) Save(ctx context.Context, p position) error {
	if !f.held() {
		return errFenced
	}
	return f.checkpoint.Save(ctx, p)
}

// fileCheckpoint is one JSON file per controller, replaced atomically.
type fileCheckpoint struct{ path string }

// newFileCheckpoint stores the position of controller in dir/<controller>.position.json.
func newFileCheckpoint(dir, controller string) (checkpoint, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("couldn't create checkpoint dir: %w", err)
	}
	return &fileCheckpoint{path: filepath.Join(dir, sanitizeToken(controller)+".position.json")}, nil
}

func (f *fileCheckpoint) Load(context.Context) (position, bool, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return position{}, false, nil
	}
	if err != nil {
		return position{}, false, fmt.Errorf("couldn't read position: %w", err)
	}
	var p position
	if err := json.Unmarshal(b, &p); err != nil {
		return position{}, false, fmt.Errorf("couldn't decode position %s: %w", f.path, err)
	}
	return p, true, nil
}

// Save writes a temp file, fsyncs it, renames it over the old one and fsyncs the directory, so a
// crash leaves either the old or the new position, never a torn one.
func (f *fileCheckpoint) Save(_ context.Context, p position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, ".position-*")
	if err != nil {
		return fmt.Errorf("couldn't write position: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't write position: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("couldn't sync position: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("couldn't write position: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("couldn't replace position: %w", err)
	}
	// Without the directory fsync a crash can undo the rename: report it like any other failure,
	// so the save is retried.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("couldn't sync checkpoint dir: %w", err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("couldn't sync checkpoint dir: %w", err)
	}
	return nil
}

// kvCheckpoint keeps the position in a JetStream key-value bucket, written with compare-and-set
// so that a second instance cannot move it backwards. The bucket is opened on first use, so
// that NATS being away at start only delays forwarding (Load and Save fail and are retried).
type kvCheckpoint struct {
	conn     *natsconn.Conn
	js       jetstream.JetStream // the events' context on conn
	replicas int                 // of the bucket, when this creates it
	timeout  time.Duration       // of a read from the bucket's stream leader
	kv       jetstream.KeyValue  // nil until opened
	key      string
	// instance tells this process's writes from another instance's: a write applied whose reply
	// was lost leaves rev stale, and the next compare-and-set must not read as a conflict.
	instance string
	mu       sync.Mutex
	rev      uint64 // revision this instance last read or wrote; 0 = key absent
	seq      uint64 // writes attempted by this instance
}

// kvRecord is what the bucket holds: the position and which write of which instance stored it.
type kvRecord struct {
	position
	Writer string `json:"writer,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
}

// PositionsBucket is the key-value bucket of the nats_kv position store.
const PositionsBucket = "VEIL_EXPORTER_POSITIONS"

// newKVCheckpoint stores the position of controller in the PositionsBucket bucket.
func newKVCheckpoint(s *Stream, controller string) (checkpoint, error) {
	if s == nil || s.js == nil {
		return nil, errors.New("checkpoint store nats_kv needs nats.jetstream.enabled")
	}
	return &kvCheckpoint{conn: s.conn, js: s.js, replicas: s.replicas, timeout: s.cfg.JetStream.PublishTimeout, key: sanitizeToken(controller), instance: uuid.NewString()}, nil
}

// open creates or opens the bucket once; k.mu is held.
func (k *kvCheckpoint) open(ctx context.Context) error {
	if k.kv != nil {
		return nil
	}
	if !k.conn.Connected() {
		return fmt.Errorf("position store (bucket %s): %w", PositionsBucket, k.conn.NotConnected())
	}
	// Opened as it is: an update would reset what an operator set (its replicas on a cluster).
	kv, err := k.js.KeyValue(ctx, PositionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = k.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: PositionsBucket, Storage: jetstream.FileStorage, Replicas: k.replicas})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = k.js.KeyValue(ctx, PositionsBucket) // another instance created it meanwhile
		}
	}
	if err != nil {
		return fmt.Errorf("couldn't open bucket %s on NATS at %s: %w", PositionsBucket, k.conn.URL(), err)
	}
	k.kv = kv
	return nil
}

func (k *kvCheckpoint) Load(ctx context.Context) (position, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.open(ctx); err != nil {
		return position{}, false, err
	}
	e, err := k.kv.Get(ctx, k.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		k.rev = 0
		return position{}, false, nil
	}
	if err != nil {
		return position{}, false, fmt.Errorf("couldn't read position: %w", err)
	}
	k.rev = e.Revision()
	var r kvRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return position{}, false, fmt.Errorf("couldn't decode position: %w", err)
	}
	return r.position, true, nil
}

func (k *kvCheckpoint) Save(ctx context.Context, p position) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.open(ctx); err != nil {
		return err
	}
	k.seq++
	b, err := json.Marshal(kvRecord{position: p.stored(), Writer: k.instance, Seq: k.seq})
	if err != nil {
		return err
	}
	rev, err := k.put(ctx, b)
	// An earlier write of ours may have been applied with its reply lost (disconnect, timeout),
	// or be applied only now, after the key was read back: while the key holds a write of ours,
	// its revision is ours to write over.
	for range 3 {
		if !isCASFailure(err) {
			break
		}
		own, gerr := k.ownsKey(ctx)
		if gerr != nil {
			return fmt.Errorf("couldn't store position: %w", gerr)
		}
		if !own {
			return fmt.Errorf("%w (bucket %s, key %s)", errCheckpointConflict, PositionsBucket, k.key)
		}
		rev, err = k.put(ctx, b)
	}
	if isCASFailure(err) {
		return fmt.Errorf("%w (bucket %s, key %s)", errCheckpointConflict, PositionsBucket, k.key)
	}
	if err != nil {
		return fmt.Errorf("couldn't store position: %w", err)
	}
	k.rev = rev
	return nil
}

// put writes b with compare-and-set on the revision this instance knows.
func (k *kvCheckpoint) put(ctx context.Context, b []byte) (uint64, error) {
	if k.rev == 0 {
		return k.kv.Create(ctx, k.key, b)
	}
	return k.kv.Update(ctx, k.key, b, k.rev)
}

// ownsKey reads the key from the bucket's stream leader (a direct get may be answered by a
// lagging replica, whose older revision would then read as another instance's write) and says
// whether its latest value is one this instance wrote; if so it adopts that revision.
func (k *kvCheckpoint) ownsKey(ctx context.Context) (bool, error) {
	m, err := lastMessage(ctx, k.conn, k.timeout, "KV_"+PositionsBucket, "$KV."+PositionsBucket+"."+k.key)
	if err != nil {
		return false, fmt.Errorf("couldn't read position back: %w", err)
	}
	if m == nil || m.header.Get("KV-Operation") != "" {
		return false, nil // deleted or purged by someone else
	}
	var r kvRecord
	if err := json.Unmarshal(m.data, &r); err != nil {
		return false, nil // not ours: we only write what decodes
	}
	if r.Writer != k.instance || r.Seq > k.seq {
		return false, nil
	}
	k.rev = m.seq
	return true, nil
}

// isCASFailure says whether err is the server refusing a compare-and-set (the revision moved).
func isCASFailure(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		strings.Contains(err.Error(), "wrong last sequence")
}
