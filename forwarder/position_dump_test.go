package forwarder

// dump shows a case that does not settle (VEIL_PROPERTY_DEBUG=1).

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
)

func (c *propCase) dump(t *testing.T) {
	pos := c.fw.pos
	t.Logf("pos W=%s ids=%v fut=%d odd=%v order=%s page=%d", pos.Created, pos.IDs, len(pos.Future), pos.Odd, c.fw.reader.served(), c.fw.reader.page)
	bd, err := c.fw.reader.locate(context.Background(), &pos)
	t.Logf("boundary %+v err %v", bd, err)
	for i, e := range c.j.evs {
		if i > bd.b-5 && i < bd.b+5 || i < 3 {
			t.Logf("%d %s %s %s", i, e.key, e.kind, e.at.Format("15:04:05.000000"))
		}
	}
}

// trace logs a step with VEIL_PROPERTY_TRACE=1: the journal, what was published since before
// and the position after.
func (c *propCase) trace(what string, before int, err error) {
	if os.Getenv("VEIL_PROPERTY_TRACE") == "" {
		return
	}
	var j []string
	for _, e := range c.j.evs {
		j = append(j, fmt.Sprintf("%s/%s/%s", e.key[min(len(e.key), 3):min(len(e.key), 8)], e.kind[:2], e.at.Format("04:05.000000")))
	}
	var pub []string
	for _, m := range c.s.msgs[before:] {
		pub = append(pub, m.header.Get(nats.MsgIdHdr))
	}
	pos := c.fw.pos
	var fut []string
	for _, f := range pos.Future {
		fut = append(fut, fmt.Sprintf("%s@%s/%d", f.ID, f.Created.Format("04:05.000000"), f.After))
	}
	c.t.Logf("%s now=%s err=%v\n  journal %v\n  published %v\n  W=%s ids=%v fut=%v odd=%v ahead=%d tail=%s hint=%d", what, c.now.Format("04:05.000"), err, j, pub, pos.Created.Format("04:05.000000"), pos.IDs, fut, pos.Odd, pos.Ahead, pos.TailID, c.fw.reader.hint)
}
