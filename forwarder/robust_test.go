package forwarder

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

// lostReplyKV applies writes on the server and then, while lose is positive, reports a timeout
// instead of the reply: the write happened, the writer does not know it.
type lostReplyKV struct {
	jetstream.KeyValue
	lose atomic.Int32
}

func (l *lostReplyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := l.KeyValue.Create(ctx, key, value, opts...)
	return l.reply(rev, err)
}

func (l *lostReplyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := l.KeyValue.Update(ctx, key, value, last)
	return l.reply(rev, err)
}

func (l *lostReplyKV) reply(rev uint64, err error) (uint64, error) {
	if err == nil && l.lose.Add(-1) >= 0 {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// TestKVCheckpointLostReplyIsNotAConflict proves that a write applied on the server whose reply
// was lost does not make the next write a false conflict, while a real second instance still
// conflicts (also when it stores the very same position).
func TestKVCheckpointLostReplyIsNotAConflict(t *testing.T) {
	tests := []struct {
		name string
		// before runs on the owner (a) and may use a second instance (b) on the same key.
		before       func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, b Checkpoint)
		wantConflict bool
	}{
		{
			name: "lost reply to the first write (create)",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ Checkpoint) {
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p1")))
			},
		},
		{
			name: "lost reply to an update",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ Checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p2")))
			},
		},
		{
			name: "several lost replies in a row",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, _ Checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(3)
				for _, id := range []string{"p2", "p3", "p4"} {
					mustFailNotConflict(t, a.Save(context.Background(), pos(id)))
				}
			},
		},
		{
			name: "second instance took over after a lost reply",
			before: func(t *testing.T, a *kvCheckpoint, lost *lostReplyKV, b Checkpoint) {
				mustSave(t, a, pos("p1"))
				lost.lose.Store(1)
				mustFailNotConflict(t, a.Save(context.Background(), pos("p2")))
				if _, _, err := b.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := b.Save(context.Background(), pos("other")); err != nil {
					t.Fatal(err)
				}
			},
			wantConflict: true,
		},
		{
			name: "second instance wrote the same position",
			before: func(t *testing.T, a *kvCheckpoint, _ *lostReplyKV, b Checkpoint) {
				mustSave(t, a, pos("p1"))
				if _, _, err := b.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := b.Save(context.Background(), pos("p1")); err != nil {
					t.Fatal(err)
				}
			},
			wantConflict: true,
		},
	}
	r := newRig(t, veiltest.Options{InitialTasks: -1}, "auto", "earliest")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			controller := "ctl" + string(rune('a'+i))
			cp, err := NewKVCheckpoint(ctx, r.conn, controller)
			if err != nil {
				t.Fatal(err)
			}
			a := cp.(*kvCheckpoint)
			lost := &lostReplyKV{KeyValue: a.kv}
			a.kv = lost
			b, _ := NewKVCheckpoint(ctx, r.conn, controller)
			tt.before(t, a, lost, b)

			err = a.Save(ctx, pos("next"))
			if tt.wantConflict {
				if !errors.Is(err, ErrCheckpointConflict) {
					t.Fatalf("Save after another instance wrote: err=%v, want ErrCheckpointConflict", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Save after a lost reply: %v, want success", err)
			}
			mustSave(t, a, pos("after"))
			got, ok, err := b.Load(ctx)
			if err != nil || !ok || len(got.IDs) != 1 || got.IDs[0] != "after" {
				t.Fatalf("stored %+v ok=%v err=%v, want the owner's last position", got, ok, err)
			}
		})
	}
}

func pos(id string) Position {
	return Position{Known: true, Created: time.Unix(1700000000, 0).UTC(), IDs: []string{id}}
}

func mustSave(t *testing.T, cp Checkpoint, p Position) {
	t.Helper()
	if err := cp.Save(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func mustFailNotConflict(t *testing.T, err error) {
	t.Helper()
	if err == nil || errors.Is(err, ErrCheckpointConflict) {
		t.Fatalf("Save with a lost reply: err=%v, want a plain failure", err)
	}
}
