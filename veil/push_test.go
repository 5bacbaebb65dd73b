package veil_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func pushClient(t *testing.T, sim *veiltest.Server, token string) *veil.Client {
	t.Helper()
	c, err := veil.New(veil.Config{URL: sim.URL, Token: token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPushFramesAreListItems: a VM powered off arrives as an UPDATED frame whose object decodes
// to what the list then answers for it, and the token (given with its "jwt " prefix, as the REST
// client takes it) is accepted in the query.
func TestPushFramesAreListItems(t *testing.T) {
	sim := veiltest.New(veiltest.Options{Seed: 3, VMs: 5})
	t.Cleanup(sim.Close)
	c := pushClient(t, sim, "jwt "+sim.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.DialPush(ctx, []string{"/domains/"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The subscription is acknowledged before data flows: a change made after DialPush returns
	// may still race the "add"; retry the change until a frame of it comes.
	vm := sim.DomainIDs()[0]
	got := make(chan veil.PushFrame, 1)
	go func() {
		for {
			f, err := p.Next(ctx)
			if err != nil {
				return
			}
			if f.ID == vm {
				got <- f
				return
			}
		}
	}()
	var f veil.PushFrame
	for on := false; ; on = !on {
		change := sim.PowerOff
		if on {
			change = sim.PowerOn
		}
		if err := change(vm); err != nil {
			t.Fatal(err)
		}
		select {
		case f = <-got:
		case <-time.After(500 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatal("no frame of the VM")
		}
		break
	}
	if f.Resource != "/domains/" || f.Event != veil.PushUpdated {
		t.Fatalf("frame %+v, want an UPDATED /domains/ frame", f)
	}
	pushed, err := veil.DecodeObject[veil.Domain](f.Object)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := c.Domains(ctx, veil.Query{"ids": {vm}})
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	if pushed.ID != vm || pushed.UserPowerState != listed[0].UserPowerState || pushed.Status != listed[0].Status || pushed.Node.ID != listed[0].Node.ID {
		t.Errorf("pushed %+v\nlisted %+v", pushed, listed[0])
	}
}

// TestPushRefused: a controller without the channel gives ErrNoPush; a refused token gives
// ErrUnauthorized at the first Next, and its text never appears in errors.
func TestPushRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	none := veiltest.New(veiltest.Options{Seed: 3, VMs: 2, NoPush: true})
	t.Cleanup(none.Close)
	if _, err := pushClient(t, none, none.Token).DialPush(ctx, []string{"/domains/"}); !errors.Is(err, veil.ErrNoPush) {
		t.Errorf("without /ws/: %v, want ErrNoPush", err)
	}
	sim := veiltest.New(veiltest.Options{Seed: 3, VMs: 2})
	t.Cleanup(sim.Close)
	const secret = "not-the-token-s3cret"
	p, err := pushClient(t, sim, secret).DialPush(ctx, []string{"/domains/"})
	if err != nil {
		t.Fatalf("the upgrade is accepted before the token is judged: %v", err)
	}
	defer p.Close()
	_, err = p.Next(ctx)
	if !errors.Is(err, veil.ErrUnauthorized) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad token: %v, want ErrUnauthorized without the token", err)
	}
}

// TestPushErrorsNeverHoldTheToken: a dial that fails (nothing listens) names the cause, not the
// URL whose query holds the token, raw or escaped.
func TestPushErrorsNeverHoldTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const tok = "s3cret+token/with=chars"
	c, err := veil.New(veil.Config{URL: "http://" + addr, Token: tok, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.DialPush(ctx, []string{"/domains/"})
	if err == nil {
		t.Fatal("a dial to a closed port succeeded")
	}
	for _, leak := range []string{tok, url.QueryEscape(tok), "s3cret"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the error holds the token (%q): %v", leak, err)
		}
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("the error does not say why: %v", err)
	}
}
