package testutil

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoLink is a Link to a server that echoes every line, and a connection through it.
func echoLink(t *testing.T) (*Link, net.Conn, *bufio.Reader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	l := newLink(t, ln.Addr().String())
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return l, c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

// TestLinkDropIsSilentAndHealCloses: a Drop of either direction keeps the connection up while
// nothing comes back; Heal then closes the connection that lost bytes, and a new one works.
func TestLinkDropIsSilentAndHealCloses(t *testing.T) {
	for _, dir := range []Direction{Forward, Back} {
		l, c, r := echoLink(t)
		if s, err := roundTrip(c, r, 5*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("before the drop: %q %v", s, err)
		}
		l.Drop(dir)
		if _, err := roundTrip(c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("direction %d dropped: %v, want no answer and no close", dir, err)
		}
		l.Heal()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("after Heal the damaged connection reads %v, want it closed", err)
		}
		c2, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if s, err := roundTrip(c2, bufio.NewReader(c2), 5*time.Second); err != nil || s != "ping\n" {
			t.Fatalf("a new connection after Heal: %q %v", s, err)
		}
		c2.Close()
	}
}

// TestLinkDelayHoldsEachChunk: with Delay, a round trip takes at least twice the delay.
func TestLinkDelayHoldsEachChunk(t *testing.T) {
	l, c, r := echoLink(t)
	const d = 100 * time.Millisecond
	l.Delay(d)
	start := time.Now()
	if s, err := roundTrip(c, r, 5*time.Second); err != nil || s != "ping\n" {
		t.Fatalf("%q %v", s, err)
	}
	if took := time.Since(start); took < 2*d {
		t.Errorf("round trip took %v through a link delaying %v each way", took, d)
	}
}
