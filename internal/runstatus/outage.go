// Outage: the one policy for logging a run of failures of a background activity (a controller's
// refresh, the guest sweep, event forwarding, the NATS connection, the lease bucket).

package runstatus

import (
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// Outage logs a run of failures of one activity: its first failure, a reminder at most every
// Remind while the run lasts (none when Remind is 0), with EachCause a failure whose message
// differs from the one logged last (a token rejected after a controller was down), and the run's
// end, with how many failures it had and for how long. Every other failure is only counted:
// during an outage every retry fails alike, and one line says it, not one per retry. Safe for
// concurrent use.
type Outage struct {
	Logger    log.Logger
	Remind    time.Duration
	EachCause bool

	mu           sync.Mutex
	failing      bool
	msg          string    // of the failure logged last
	since, shown time.Time // the run's first failure, the last line logged
	n            int       // failures in the run
	err          string    // the last failure's error text
}

// Fail counts a failure at now and logs msg with kv and err (when not nil) at lvl (level.Warn,
// level.Error) if it starts a run (or, with EachCause, differs from the failure logged last), a
// reminder if one is due; it reports whether it logged.
func (o *Outage) Fail(now time.Time, lvl func(log.Logger) log.Logger, msg string, err error, kv ...any) bool {
	o.mu.Lock()
	o.n++
	text := ""
	if err != nil {
		text = err.Error()
	}
	o.err = text
	first := !o.failing || (o.EachCause && o.msg != msg)
	remind := !first && o.Remind > 0 && now.Sub(o.shown) >= o.Remind
	if !o.failing {
		o.failing, o.since = true, now
	}
	if first || remind {
		o.msg, o.shown = msg, now
	}
	n, since := o.n, o.since
	o.mu.Unlock()
	if err != nil {
		kv = append(kv, "err", text)
	}
	switch {
	case first:
		lvl(o.logger()).Log(append([]any{"msg", msg}, kv...)...)
	case remind:
		lvl(o.logger()).Log(append([]any{"msg", msg + " (still failing)", "failures", n, "failing_for", now.Sub(since).Round(time.Second)}, kv...)...)
	}
	return first || remind
}

// Recover ends a run of failures at now, logging msg with kv, the run's failures and its length
// at info; it reports whether a run ended (nothing is logged otherwise).
func (o *Outage) Recover(now time.Time, msg string, kv ...any) bool {
	o.mu.Lock()
	failing, n, since := o.failing, o.n, o.since
	o.failing, o.msg, o.n, o.err = false, "", 0, ""
	o.mu.Unlock()
	if failing {
		level.Info(o.logger()).Log(append([]any{"msg", msg, "failures", n, "failing_for", now.Sub(since).Round(time.Millisecond)}, kv...)...)
	}
	return failing
}

// Failing reports the failures of the run under way (0: none), since when, and the last error
// text.
func (o *Outage) Failing() (n int, since time.Time, err string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.since, o.err
}

func (o *Outage) logger() log.Logger {
	if o.Logger == nil {
		return log.NewNopLogger()
	}
	return o.Logger
}
