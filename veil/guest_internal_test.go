package veil

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGuestErrorKindOfPlatformMessages: the platform's refusals are told apart by their text,
// here and nowhere else, so callers only test the typed errors.
func TestGuestErrorKindOfPlatformMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{nil, nil},
		{context.DeadlineExceeded, ErrGuestTimeout},
		{context.Canceled, nil},
		{errors.New("connection refused"), nil},
		{&APIError{StatusCode: 504}, ErrGuestTimeout},
		{&APIError{StatusCode: 400, Message: "Guest agent is not connected"}, ErrAgentNotRunning},
		{&APIError{StatusCode: 400, Message: "QEMU guest agent is not running"}, ErrAgentNotRunning},
		{&APIError{StatusCode: 400, Message: "Virtual machine timeout-test is not running."}, ErrAgentNotRunning},
		{&APIError{StatusCode: 400, Message: "Command guest-exec not supported"}, ErrGuestUnsupported},
		{&APIError{StatusCode: 400, Message: "Guest commands are available for Linux guests only"}, ErrGuestUnsupported},
		{&APIError{StatusCode: 400, Message: "Guest agent error: The command guest-get-load has not been found"}, ErrGuestUnsupported},
		{&APIError{StatusCode: 400, Field: "qemu_cmd", Message: "\"guest-x\" is not a valid choice."}, ErrGuestUnsupported},
		{&APIError{StatusCode: 500, Message: "Guest agent command timed out"}, ErrGuestTimeout},
		{&APIError{StatusCode: 500, Message: "Internal server error"}, nil},
		{&APIError{StatusCode: 401}, nil},
	} {
		err := guestError(tc.err)
		for _, k := range []error{ErrGuestTimeout, ErrAgentNotRunning, ErrGuestUnsupported} {
			if got := errors.Is(err, k); got != (k == tc.want) {
				t.Errorf("guestError(%v): errors.Is(%v) = %v, want %v", tc.err, k, got, k == tc.want)
			}
		}
		if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("guestError(%v) lost the cause: %v", tc.err, err)
		}
	}
}

func TestGuestNanosReadsNumbersAndQuotedNumbers(t *testing.T) {
	const ns = 1700000000123456789
	for _, in := range []string{`1700000000123456789`, `"1700000000123456789"`, ` " 1700000000123456789 " `, `1.700000000123456789e18`} {
		got, err := guestNanos([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if d := got.Sub(time.Unix(0, ns)); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s = %v, want %v", in, got, time.Unix(0, ns))
		}
	}
	for _, in := range []string{`"abc"`, `{}`, `null`, `-5`, `""`} {
		if got, err := guestNanos([]byte(in)); err == nil {
			t.Errorf("%s = %v, want an error", in, got)
		}
	}
}

// TestGuestClockOffsetIsAgainstTheMiddleOfTheRoundTrip: a guest whose clock equals ours at the
// middle of the exchange has no offset, however long the exchange took.
func TestGuestClockOffsetIsAgainstTheMiddleOfTheRoundTrip(t *testing.T) {
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, rtt := range []time.Duration{0, time.Millisecond, 3 * time.Second} {
		for _, skew := range []time.Duration{0, -90 * time.Second, 250 * time.Millisecond} {
			g := GuestClock{Time: sent.Add(rtt / 2).Add(skew), Sent: sent, Received: sent.Add(rtt)}
			if g.Offset() != skew || g.RoundTrip() != rtt {
				t.Errorf("rtt %v skew %v: offset %v, round trip %v", rtt, skew, g.Offset(), g.RoundTrip())
			}
		}
	}
}
