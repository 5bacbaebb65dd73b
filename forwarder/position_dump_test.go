//go:build property

package forwarder

// dump shows a case that does not settle (VEIL_PROPERTY_DEBUG=1).

import (
	"context"
	"testing"
)

func (c *propCase) dump(t *testing.T) {
	pos := c.fw.pos
	t.Logf("pos W=%s ids=%v fut=%d odd=%v order=%s page=%d", pos.Created, pos.IDs, len(pos.Future), pos.Odd, c.fw.order, c.fw.page)
	bd, err := c.fw.locate(context.Background(), &pos, c.fw.hint)
	t.Logf("boundary %+v err %v", bd, err)
	for i, e := range c.j.evs {
		if i > bd.b-5 && i < bd.b+5 || i < 3 {
			t.Logf("%d %s %s %s", i, e.key, e.kind, e.at.Format("15:04:05.000000"))
		}
	}
}
