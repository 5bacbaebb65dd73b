package exposition

// Desc: one family's name, help, type and labels, and how its series lines are written.

import (
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Desc describes one family as prometheus.Desc does, and knows how to write its series lines
// exactly as client_golang's text encoder would.
type Desc struct {
	// Prom is the same family for the live path (prometheus.NewConstMetric).
	Prom *prometheus.Desc

	name   string
	header string // "# HELP ...\n# TYPE ...\n"
	nvar   int    // variable labels
	// slots are the labels in the order they are written (sorted by name): a variable label's
	// index, or -1 and the escaped constant value.
	slots []slot
	// valueStart is where the first label value starts in a line: after `name{label="`.
	valueStart int
	small      bool // held in small blocks (SmallBlocks)

	headOnce sync.Once
	head     piece // header, compressed at the first render

	typ  prometheus.ValueType
	help string
	// live is the labels of a series on the live path (live.go); liveOK is false when that
	// path must leave the series to prometheus.NewConstMetric: a type other than gauge or
	// counter, or a Desc client_golang refuses (NewConstMetric returns its error).
	live   []liveLabel
	liveOK bool
	// The header in the other formats, made at their first use (formats.go).
	omOnce    sync.Once
	omText    string
	omHead    piece
	protoOnce sync.Once
	protoHead []byte
}

// compressedHeader returns the header as a deflate segment, made once.
func (d *Desc) compressedHeader() *piece {
	d.headOnce.Do(func() {
		d.head = pieceOf(d.header)
	})
	return &d.head
}

type slot struct {
	label    string
	prefix   string // `{name="` or `,name="`
	varIdx   int
	constVal string
}

// NewDesc returns the Desc of a gauge or counter family.
func NewDesc(name, help string, typ prometheus.ValueType, variableLabels []string, constLabels prometheus.Labels) *Desc {
	d := &Desc{
		Prom: prometheus.NewDesc(name, help, variableLabels, constLabels),
		name: name,
		nvar: len(variableLabels),
		typ:  typ,
		help: help,
	}
	t := "gauge"
	if typ == prometheus.CounterValue {
		t = "counter"
	}
	d.header = "# HELP " + name + " " + helpEscaper.Replace(help) + "\n# TYPE " + name + " " + t + "\n"
	for i, l := range variableLabels {
		d.slots = append(d.slots, slot{varIdx: i, prefix: l})
	}
	for l, v := range constLabels {
		d.slots = append(d.slots, slot{varIdx: -1, prefix: l, constVal: valueEscaper.Replace(v)})
	}
	sort.Slice(d.slots, func(i, j int) bool { return d.slots[i].prefix < d.slots[j].prefix })
	for i := range d.slots {
		sep := ","
		if i == 0 {
			sep = "{"
			d.valueStart = len(name) + len(sep) + len(d.slots[i].prefix) + 2
		}
		d.slots[i].label = d.slots[i].prefix
		d.slots[i].prefix = sep + d.slots[i].prefix + `="`
	}
	d.live = liveLabels(d.slots, constLabels)
	_, err := prometheus.NewConstMetric(d.Prom, typ, 0, make([]string, d.nvar)...)
	d.liveOK = err == nil && (typ == prometheus.GaugeValue || typ == prometheus.CounterValue)
	return d
}

// Name is the family's name.
func (d *Desc) Name() string { return d.name }

// The escaping of client_golang's text format (prometheus/common/expfmt).
var (
	helpEscaper  = strings.NewReplacer("\\", `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer("\\", `\\`, "\n", `\n`, "\"", `\"`)
)
