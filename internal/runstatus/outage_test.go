package runstatus

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// TestOutageLogsARunOnce proves which failures of a run are logged at their level: the first,
// then a reminder once Remind has passed, another cause only with EachCause, and the end of the
// run with its count; the rest go to debug, and a failure after a recovery starts a new run.
func TestOutageLogsARunOnce(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const remind = 5 * time.Minute
	boom := errors.New("boom")
	type step struct {
		name    string
		at      time.Duration
		recover bool
		msg     string
		want    string // the line logged at info or above ("" for none)
	}
	for _, tc := range []struct {
		eachCause bool
		steps     []step
	}{
		{false, []step{
			{"the first failure is logged", 0, false, "down", `level=warn msg=down err=boom`},
			{"a retry a second later is not", time.Second, false, "down", ""},
			{"nor another cause without EachCause", 2 * time.Second, false, "refused", ""},
			{"nor one just short of the interval", remind - time.Second, false, "down", ""},
			{"a reminder once the interval passed", remind, false, "down", `level=warn msg="down (still failing)" failures=5 failing_for=5m0s err=boom`},
			{"no second reminder right after", remind + time.Second, false, "down", ""},
			{"recovery ends the run", remind + 2*time.Second, true, "up", `level=info msg=up failures=6 failing_for=5m2s`},
			{"a second recovery says nothing", remind + 3*time.Second, true, "up", ""},
			{"a failure after recovery is a first again", remind + 4*time.Second, false, "down", `level=warn msg=down err=boom`},
		}},
		{true, []step{
			{"the first failure is logged", 0, false, "down", `level=warn msg=down err=boom`},
			{"the same cause is not", time.Second, false, "down", ""},
			{"another cause is", 2 * time.Second, false, "token rejected", `level=warn msg="token rejected" err=boom`},
			{"and so is the first again", 3 * time.Second, false, "down", `level=warn msg=down err=boom`},
			{"recovery counts the whole run", 4 * time.Second, true, "up", `level=info msg=up failures=4 failing_for=4s`},
		}},
	} {
		var buf bytes.Buffer
		o := Outage{Logger: level.NewFilter(log.NewLogfmtLogger(&buf), level.AllowInfo()), Remind: remind, EachCause: tc.eachCause}
		for _, s := range tc.steps {
			buf.Reset()
			now := t0.Add(s.at)
			if s.recover {
				if got := o.Recover(now, s.msg); got != (s.want != "") {
					t.Errorf("EachCause %v, %s: Recover = %v", tc.eachCause, s.name, got)
				}
			} else if got := o.Fail(now, level.Warn, s.msg, boom); got != (s.want != "") {
				t.Errorf("EachCause %v, %s: Fail = %v", tc.eachCause, s.name, got)
			}
			if got := strings.TrimSpace(buf.String()); got != s.want {
				t.Errorf("EachCause %v, %s: logged %q, want %q", tc.eachCause, s.name, got, s.want)
			}
		}
	}
}

// TestOutageFailing reports the run under way and forgets it at recovery.
func TestOutageFailing(t *testing.T) {
	var o Outage // no logger: nothing is written anywhere
	t0 := time.Unix(1_700_000_000, 0)
	if n, _, _ := o.Failing(); n != 0 {
		t.Fatalf("a new Outage has %d failures", n)
	}
	o.Fail(t0, level.Warn, "down", errors.New("first"))
	o.Fail(t0.Add(time.Second), level.Warn, "down", errors.New("second"))
	if n, since, err := o.Failing(); n != 2 || !since.Equal(t0) || err != "second" {
		t.Fatalf("Failing() = %d, %v, %q; want 2 since t0, the last error", n, since, err)
	}
	o.Recover(t0.Add(2*time.Second), "up")
	if n, _, err := o.Failing(); n != 0 || err != "" {
		t.Fatalf("after recovery Failing() = %d, %q", n, err)
	}
}
