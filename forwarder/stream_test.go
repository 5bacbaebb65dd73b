package forwarder

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
	"github.com/veil-exporter/veil-exporter/natsconn"
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() log.Logger { return log.NewLogfmtLogger(b) }

// TestConnectLeavesAnExistingStreamAlone proves that starting (twice, as after a restart) with
// create_stream: true creates a missing stream but never rewrites a provisioned one, and says
// clearly when an existing stream does not fit.
// existingStreamCase is a stream found at start (or none), and what Connect must make of it.
type existingStreamCase struct {
	name     string
	existing *jetstream.StreamConfig // nil: no stream yet
	create   bool
	wantErr  string // "" means Connect succeeds
	wantWarn string
	check    func(t *testing.T, got jetstream.StreamConfig)
}

// existingStreamCases are the rows of TestConnectLeavesAnExistingStreamAlone, around a stream
// provisioned by hand.
func existingStreamCases() []existingStreamCase {
	provisioned := jetstream.StreamConfig{
		Name: "VEIL_EVENTS", Subjects: []string{"veil.events.>"}, Storage: jetstream.FileStorage,
		MaxAge: 720 * time.Hour, MaxBytes: 10 << 30, MaxMsgSize: 1 << 20, Duplicates: 2 * time.Hour,
		DenyDelete: true, AllowDirect: true, Description: "provisioned by hand", AllowAtomicPublish: true,
	}
	return []existingStreamCase{
		{"provisioned limits survive two starts", &provisioned, true, "", "", func(t *testing.T, got jetstream.StreamConfig) {
			if got.MaxAge != 720*time.Hour || got.MaxBytes != 10<<30 || got.MaxMsgSize != 1<<20 ||
				got.Duplicates != 2*time.Hour || !got.DenyDelete || !got.AllowDirect || got.Description != "provisioned by hand" {
				t.Errorf("stream settings changed: %+v", got)
			}
		}},
		{"limits survive where an update would be allowed (no deny_delete)", withStream(provisioned, func(c *jetstream.StreamConfig) { c.DenyDelete = false }), true, "", "", func(t *testing.T, got jetstream.StreamConfig) {
			if got.MaxAge != 720*time.Hour || got.MaxBytes != 10<<30 || got.Duplicates != 2*time.Hour {
				t.Errorf("stream limits reset: max_age %v, max_bytes %d, duplicates %v", got.MaxAge, got.MaxBytes, got.Duplicates)
			}
		}},
		{"a wider subject filter is accepted", withStream(provisioned, func(c *jetstream.StreamConfig) { c.Subjects = []string{"veil.>"} }), true, "", "", func(t *testing.T, got jetstream.StreamConfig) {
			if len(got.Subjects) != 1 || got.Subjects[0] != "veil.>" {
				t.Errorf("subjects changed: %q", got.Subjects)
			}
		}},
		{"a missing stream is created with the configured duplicate window", nil, true, "", "", func(t *testing.T, got jetstream.StreamConfig) {
			if len(got.Subjects) != 1 || got.Subjects[0] != "veil.events.>" || got.Duplicates != time.Hour {
				t.Errorf("created stream: subjects %q, duplicates %v", got.Subjects, got.Duplicates)
			}
		}},
		{"a missing stream without create_stream is an error", nil, false, "does not exist", "", nil},
		{"subjects not covering the prefix are an error, stream unchanged", withStream(provisioned, func(c *jetstream.StreamConfig) { c.Subjects = []string{"other.*"} }), true,
			`does not capture subjects "veil.events.>"`, "", func(t *testing.T, got jetstream.StreamConfig) {
				if len(got.Subjects) != 1 || got.Subjects[0] != "other.*" {
					t.Errorf("subjects changed: %q", got.Subjects)
				}
			}},
		// The expectation every publish carries guards against duplicates, not the window.
		{"a short duplicate window is no concern, stream unchanged", withStream(provisioned, func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }), true,
			"", "", func(t *testing.T, got jetstream.StreamConfig) {
				if got.Duplicates != time.Second || got.MaxAge != 720*time.Hour {
					t.Errorf("stream settings changed: %+v", got)
				}
			}},
		{"a stream without allow_atomic is a warning, stream unchanged", withStream(provisioned, func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = false }), true,
			"", "does not take atomic batches", func(t *testing.T, got jetstream.StreamConfig) {
				if got.AllowAtomicPublish || got.MaxAge != 720*time.Hour {
					t.Errorf("stream settings changed: %+v", got)
				}
			}},
		{"a created stream takes atomic batches", nil, true, "", "", func(t *testing.T, got jetstream.StreamConfig) {
			if !got.AllowAtomicPublish {
				t.Errorf("created stream without allow_atomic: %+v", got)
			}
		}},
	}
}

func TestConnectLeavesAnExistingStreamAlone(t *testing.T) {
	for _, tt := range existingStreamCases() {
		t.Run(tt.name, func(t *testing.T) {
			ns := testutil.StartNATS(t)
			js := testutil.JetStream(t, ns.URL())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if tt.existing != nil {
				if _, err := js.CreateStream(ctx, *tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			cfg := natsConfig(ns.URL())
			cfg.JetStream.CreateStream = tt.create
			var logs logBuffer
			for range 2 {
				conn, err := natsconn.Connect(cfg, logs.logger())
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
				err = NewStream(conn, cfg, 1, logs.logger()).setUp(ctx)
				conn.Close()
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("Connect: %v, want an error saying %q", err, tt.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("setUp: %v", err)
				}
			}
			if tt.wantWarn != "" && !strings.Contains(logs.String(), tt.wantWarn) {
				t.Errorf("no warning %q in logs:\n%s", tt.wantWarn, logs.String())
			}
			if tt.wantWarn == "" && strings.Contains(logs.String(), "level=warn") {
				t.Errorf("unexpected warning:\n%s", logs.String())
			}
			if tt.check == nil {
				return
			}
			s, err := js.Stream(ctx, "VEIL_EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s.CachedInfo().Config)
		})
	}
}

func withStream(c jetstream.StreamConfig, f func(*jetstream.StreamConfig)) *jetstream.StreamConfig {
	f(&c)
	return &c
}

func TestSubjectFilterCoverage(t *testing.T) {
	tests := []struct {
		stream []string
		want   bool
	}{
		{[]string{"veil.events.>"}, true},
		{[]string{">"}, true},
		{[]string{"veil.>"}, true},
		{[]string{"*.events.>"}, true},
		{[]string{"other.>", "veil.events.>"}, true},
		{[]string{"veil.events.*"}, false},
		{[]string{"veil.events"}, false},
		{[]string{"veil.events.prod.>"}, false},
		{[]string{"veil.*"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := covers(tt.stream, "veil.events.>"); got != tt.want {
			t.Errorf("covers(%q, veil.events.>) = %v, want %v", tt.stream, got, tt.want)
		}
	}
}
