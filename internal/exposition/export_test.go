package exposition

import (
	"bytes"
	"time"
)

// Families returns the text of every family in the Sets with its HELP and TYPE lines, as the
// handler writes them without compression (the rendered text to compare).
func Families(sets []*Set) ([]byte, error) {
	var b bytes.Buffer
	for _, g := range groups(sets) {
		b.WriteString(g.fams[0].Header)
		for _, f := range g.fams {
			if err := f.plain(&b); err != nil {
				return nil, err
			}
		}
	}
	return b.Bytes(), nil
}

// Waited is how long this Builder's renders have paused for scrapes, in all.
func (b *Builder) Waited() time.Duration { return b.waited }

// Render renders now, as Run does after a change.
func (c *Cache) Render() time.Duration { return c.render() }

// finishSince builds a Set replacing prev.
func (b *Builder) finishSince(prev *Set) *Set {
	b.since(prev)
	return b.Finish()
}
