package ha

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

// positionWorker stands for the forwarder: it loads the position once, then keeps writing it
// with compare-and-set at the revision it knows, each time only while the lease is valid. It
// reports "wrote <when it was sent, Unix ns>", "refused" and "stopped".
func positionWorker(kv jetstream.KeyValue, l *Lease, who string, report func(string)) {
	key := "test.position." + l.Controller()
	ctx := l.Context()
	var rev uint64
	if e, err := kv.Get(ctx, key); err == nil {
		rev = e.Revision()
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			report("stopped")
			return
		case <-t.C:
		}
		if !l.Valid() {
			continue
		}
		var err error
		var r uint64
		sent := time.Now() // a write sent before a SIGSTOP may have its answer read after the SIGCONT
		if rev == 0 {
			r, err = kv.Create(context.Background(), key, []byte(who))
		} else {
			r, err = kv.Update(context.Background(), key, []byte(who), rev)
		}
		switch {
		case err == nil:
			rev = r
			report(fmt.Sprintf("wrote %d", sent.UnixNano()))
		case isCASFailure(err):
			report("refused")
			return
		}
	}
}

func createBucket(t *testing.T, w *world) jetstream.KeyValue {
	t.Helper()
	js := testutil.JetStream(t, w.urls)
	var kv jetstream.KeyValue
	testutil.EventuallyNil(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var err error
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: w.bucket, History: 1, Replicas: 3})
		return err
	}, "the R3 bucket %s", w.bucket)
	return kv
}

// TestHelperReplica is the replica the SIGSTOP test runs as a separate process.
func TestHelperReplica(t *testing.T) {
	if os.Getenv("VEIL_HA_HELPER") == "" {
		t.Skip("run by TestSIGSTOPOwnerCannotMoveThePositionAfterSIGCONT")
	}
	say := func(s string) { fmt.Println(s) }
	nc, err := nats.Connect(os.Getenv("VEIL_HA_URLS"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	var kv atomic.Pointer[jetstream.KeyValue]
	var held atomic.Pointer[Lease]
	c, err := New(nc, Options{
		Bucket: os.Getenv("VEIL_HA_BUCKET"), Replicas: 3, LeaseTTL: testTTL, Instance: "child",
		Controllers: []string{os.Getenv("VEIL_HA_CONTROLLER")},
		OnAcquire: func(l *Lease) {
			say("acquired")
			held.Store(l)
			// A write says when it was sent: the parent reads the pipe late on a busy machine,
			// and a write from before the SIGSTOP may reach it after, or have its answer read
			// after the SIGCONT.
			go positionWorker(*kv.Load(), l, "child", say)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := js.KeyValue(context.Background(), os.Getenv("VEIL_HA_BUCKET"))
	if err != nil {
		t.Fatal(err)
	}
	kv.Store(&b)
	// A jump of the clock between two ticks is the process coming back from SIGSTOP: report
	// what the lease says at that very moment.
	go func() {
		last := time.Now()
		for range time.Tick(10 * time.Millisecond) {
			now := time.Now()
			if now.Sub(last) > testTTL/2 {
				if l := held.Load(); l != nil {
					say(fmt.Sprintf("resumed valid=%v", l.Valid()))
				}
			}
			last = now
		}
	}()
	c.Run(context.Background())
}

func TestSIGSTOPOwnerCannotMoveThePositionAfterSIGCONT(t *testing.T) {
	cl := testutil.StartCluster(t)
	const ct = "ctl0"
	w := newWorld(t, cl.URLs(), []string{ct})
	// The bucket exists before either replica opens it.
	parentKV := createBucket(t, w)
	var parentWrote atomic.Bool
	var out testutil.SyncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReplica$", "-test.v")
	testutil.DieWithTest(cmd)
	cmd.Env = append(os.Environ(), "VEIL_HA_HELPER=1", "VEIL_HA_URLS="+cl.URLs(), "VEIL_HA_BUCKET="+w.bucket, "VEIL_HA_CONTROLLER="+ct)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child runs alone first and takes the controller; the parent, started then, leaves it
	// there (a holder keeps what it holds).
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		s := bufio.NewScanner(pipe)
		for s.Scan() {
			out.Write([]byte(s.Text() + "\n"))
		}
	}()
	testutil.Eventually(t, 20*time.Second, func() bool { return strings.Contains(out.String(), "wrote ") }, "the child to own %s and write its position", ct)
	parent := w.start("parent", func(o *testOptions) {
		o.OnAcquire = func(l *Lease) {
			w.acquired(nil, l)
			go positionWorker(parentKV, l, "parent", func(s string) {
				if strings.HasPrefix(s, "wrote ") {
					parentWrote.Store(true)
				}
			})
		}
		o.OnRelease = func(string) func() { return nil }
	})
	parentWrote.Store(false)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool { return parent.c.Lease(ct) != nil && parentWrote.Load() }, "the parent to take %s over and write the position", ct)
	t.Logf("take-over from a SIGSTOPped owner: %v", time.Since(stopped))
	mark := len(out.String())
	resumed := time.Now() // a write the child made after this is one made after its SIGCONT
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(out.String()[mark:], "stopped") && strings.Contains(out.String()[mark:], "resumed")
	}, "the resumed child to report its lease and stop its worker")

	sawResume := false
	for _, line := range strings.Split(out.String()[mark:], "\n") {
		if line == "acquired" {
			break // a later, legitimate hand-back
		}
		switch {
		case strings.HasPrefix(line, "resumed"):
			sawResume = true
			if line != "resumed valid=false" {
				t.Errorf("after SIGCONT the child's lease said %q, want valid=false", line)
			}
		case strings.HasPrefix(line, "wrote "):
			var at int64
			fmt.Sscan(strings.TrimPrefix(line, "wrote "), &at)
			if at > resumed.UnixNano() {
				t.Errorf("after SIGCONT the child moved the position the new owner had set (sent %s after it)", time.Unix(0, at).Sub(resumed))
			}
		}
	}
	if !sawResume {
		t.Errorf("the child did not report its resume:\n%s", out.String()[mark:])
	}
}
