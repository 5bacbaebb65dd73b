package veiltest

// This file holds the simulated platform's state: its entities, the seeded inventory, the
// changes operations make to it (VMs added, removed, powered, moved), and seeded ids and
// timestamps.

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// state is the whole simulated platform; every method runs under Server.mu.
type state struct {
	opts Options
	rng  *rand.Rand

	nodes    []*node
	nodeByID map[string]*node
	clusters []*cluster
	pools    []*datapool
	poolByID map[string]*datapool
	clByID   map[string]*cluster

	domains       []*domain // creation order
	domainByID    map[string]*domain
	domainsByName []*domain // sorted by verbose_name; nil when stale
	vmSeq         int

	tasks    []*task // creation order
	taskByID map[string]*task
	running  []*task

	events    journal
	eventRate float64
	nextGen   time.Time // when the next background operation starts (eventRate > 0)
	bgClones  []*domain // VMs the background activity cloned, oldest first
	agentLost *domain   // the VM whose agent the background activity stopped, if any

	feed feed // the changes made, for the change log and the push channel (changes.go)

	hw  *rand.Rand // draws the VMs' disks and interfaces, apart from rng (devices.go)
	dev devices
}

type node struct {
	id, name, ip string
	cluster      *cluster
	cpus, memMiB int
	status       string
	cpuPct       float64
	memPct       float64
	stringPct    bool
	ballooning   bool
	created      time.Time
	domains, on  int
}

type cluster struct {
	id, name string
	status   string
	created  time.Time
}

type datapool struct {
	id, name, typ string
	status        string
	sizeMiB, used int
	vdisks, files int
	isos          int
}

type domain struct {
	id, name    string
	node        *node
	pool        *datapool
	cpus        int
	memMiB      int
	status      string
	power       int // 0 undefined, 1 off, 2 suspended, 3 on
	template    bool
	thin        bool
	parent      *domain
	linux       bool
	agent       bool // a guest agent is installed
	agentUp     bool // the agent answers when the VM runs
	hang        bool
	clockOffset time.Duration
	sshKeys     map[string][]string
	ipv4        string
	ipv6        []string // further guest addresses reported by guest-network-get-interfaces (SetGuestIPv6)
	tagNames    []string // set by SetTags; nil: the seeded tags
	tagsSet     bool
	cpuPct      float64
	memPct      float64
	vdisks      int
	created     time.Time
	poweredAt   time.Time
	nodeSince   time.Time
	seq         int
	busy        int                    // running tasks working on this VM
	pinned      bool                   // a client or a control call touched it: the background leaves it alone
	pctNumbers  bool                   // usage percentages as numbers (Options.PercentNumbers)
	alt         bool                   // shapes of the alternative profile (Options.Profile)
	execs       map[int]map[string]any // guest-exec results by pid, for guest-exec-status
	execSeq     int
	cmdErrors   map[string]string       // guest commands the agent offers but fails, with the error (SetGuestCommandError)
	hostile     map[string]GuestHostile // guest commands answered with something hostile (SetGuestHostile, poison.go)

	listJSON []byte // cached list encoding; nil when stale (state.changed drops it)
}

func (d *domain) agentActive() bool { return d.agent && d.agentUp && d.power == 3 }

const (
	powerUndefined = 0
	powerOff       = 1
	powerOn        = 3
)

func (st *state) init(o Options) {
	st.opts = o
	st.rng = rand.New(rand.NewPCG(uint64(o.Seed), 0x7e11_0001))
	st.nodeByID = map[string]*node{}
	st.clByID = map[string]*cluster{}
	st.poolByID = map[string]*datapool{}
	st.domainByID = map[string]*domain{}
	st.taskByID = map[string]*task{}
	st.hw = rand.New(rand.NewPCG(uint64(o.Seed), 0x7e11_0002))
	st.dev = devices{diskByID: map[string]*vdisk{}, nicByID: map[string]*vnic{}, byVM: map[*domain]*vmDevices{}}
	st.feed.init(o.ChangeLog)
	defer func() { st.feed.live = true }() // the seeded inventory is no change
	st.events.init(o.EventsRetention)
	st.eventRate = o.EventRate
	now := o.Now()
	if st.eventRate > 0 {
		st.scheduleActivity(now, 1)
	}
	base := now.Add(-30 * 24 * time.Hour).Truncate(time.Second)

	for i := range o.Clusters {
		c := &cluster{id: st.uuid(), name: fmt.Sprintf("cluster-%d", i+1), status: "ACTIVE", created: base}
		st.clusters = append(st.clusters, c)
		st.clByID[c.id] = c
	}
	for i := range o.Nodes {
		n := &node{
			id:         st.uuid(),
			name:       fmt.Sprintf("node-%03d", i+1),
			ip:         fmt.Sprintf("10.0.%d.%d", (i+1)/250, (i+1)%250+1),
			cluster:    st.clusters[i%len(st.clusters)],
			cpus:       []int{16, 32, 48, 64, 96}[st.rng.IntN(5)],
			memMiB:     []int{65536, 131072, 262144, 524288}[st.rng.IntN(4)],
			status:     "ACTIVE",
			cpuPct:     round2(st.rng.Float64() * 80),
			memPct:     round2(10 + st.rng.Float64()*80),
			stringPct:  stringPct(st.rng.Float64(), o),
			ballooning: true,
			created:    base,
		}
		if o.Nodes >= 5 && i == o.Nodes-1 {
			n.status = "SERVICE" // one node in maintenance makes status metrics interesting
		}
		st.nodes = append(st.nodes, n)
		st.nodeByID[n.id] = n
	}
	types := []string{"local", "nfs", "lvm", "zfs", "gluster"}
	for i := range o.Datapools {
		size := (1 + st.rng.IntN(20)) * 1024 * 1024
		p := &datapool{
			id: st.uuid(), typ: types[i%len(types)], status: "ACTIVE",
			sizeMiB: size, used: int(float64(size) * (0.1 + 0.8*st.rng.Float64())),
			files: st.rng.IntN(50), isos: st.rng.IntN(20),
		}
		p.name = fmt.Sprintf("pool-%d-%s", i+1, p.typ)
		st.pools = append(st.pools, p)
		st.poolByID[p.id] = p
	}
	created := base
	for i := range o.VMs {
		d := st.newDomain(created)
		if i < o.Templates {
			d.template = true
			d.power = powerOff
			d.name = fmt.Sprintf("tpl-%s-%02d", []string{"ubuntu", "debian", "astra", "win"}[i%4], i+1)
			d.linux = i%4 != 3
		} else if o.Templates > 0 && st.rng.Float64() < 0.3 {
			d.thin = true
			d.parent = st.domains[st.rng.IntN(o.Templates)]
			d.linux = d.parent.linux
		}
		st.addDomain(d)
		created = created.Add(time.Minute)
	}
	st.seedFreeDisks(base)
	st.seedTasks(now)
	st.seedEvents(now)
}

// stringPct decides whether a node sends its percentages as strings; draw is always drawn so
// the seeded inventory does not depend on the option.
func stringPct(draw float64, o Options) bool {
	if o.StringPercentNodes != 0 {
		return draw < o.StringPercentNodes
	}
	return !o.PercentNumbers
}

// percent is a usage percentage as the platform sends it: a decimal string, or a number.
func percent(v float64, asString bool) any {
	if asString {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return v
}

var vmPrefixes = []string{"web", "db", "app", "cache", "ci", "mail", "build", "vdi", "mon", "proxy"}

// newDomain makes a VM with seeded properties; the caller adds it with addDomain.
func (st *state) newDomain(created time.Time) *domain {
	st.vmSeq++
	o := st.opts
	d := &domain{
		id:         st.uuid(),
		name:       fmt.Sprintf("%s-%05d", vmPrefixes[st.rng.IntN(len(vmPrefixes))], st.vmSeq),
		cpus:       []int{1, 2, 4, 8}[st.rng.IntN(4)],
		memMiB:     []int{1024, 2048, 4096, 8192, 16384}[st.rng.IntN(5)],
		status:     "ACTIVE",
		power:      powerOff,
		linux:      st.rng.Float64() < o.LinuxFraction,
		agent:      st.rng.Float64() < o.AgentFraction,
		agentUp:    true,
		ipv4:       fmt.Sprintf("10.%d.%d.%d", 100+st.vmSeq/65000, (st.vmSeq/250)%256, st.vmSeq%250+2),
		vdisks:     1 + st.rng.IntN(3),
		created:    created,
		seq:        st.vmSeq,
		pctNumbers: o.PercentNumbers,
		alt:        o.Profile == ProfileAlternative,
	}
	if len(st.nodes) > 0 {
		d.node = st.nodes[st.rng.IntN(len(st.nodes))]
	}
	if len(st.pools) > 0 {
		d.pool = st.pools[st.rng.IntN(len(st.pools))]
	}
	if st.rng.Float64() < o.RunningFraction {
		d.power = powerOn
	}
	d.cpuPct = round2(st.rng.Float64() * 90)
	d.memPct = round2(20 + st.rng.Float64()*70)
	d.poweredAt = created
	d.nodeSince = created
	if st.rng.IntN(100) == 0 {
		d.status = "FAILED"
	}
	return d
}

func (st *state) addDomain(d *domain) { st.addDomainLike(d, nil) }

// addDomainLike adds d with disks and interfaces like those of the VM it was cloned from (nil:
// drawn anew).
func (st *state) addDomainLike(d, like *domain) {
	if d.template {
		d.power = powerOff
	}
	st.domains = append(st.domains, d)
	st.domainByID[d.id] = d
	st.domainsByName = nil
	st.addDevices(d, like)
	st.changed(ChangeCreated, d)
	if d.node != nil {
		d.node.domains++
		if d.power == powerOn {
			d.node.on++
		}
		st.changed(ChangeUpdated, d.node)
	}
	if d.pool != nil {
		d.pool.vdisks += d.vdisks
		st.changed(ChangeUpdated, d.pool)
	}
}

func (st *state) removeDomain(d *domain) {
	if _, ok := st.domainByID[d.id]; !ok {
		return
	}
	delete(st.domainByID, d.id)
	for i, x := range st.domains {
		if x == d {
			st.domains = append(st.domains[:i], st.domains[i+1:]...)
			break
		}
	}
	st.domainsByName = nil
	st.removeDevices(d)
	st.changed(ChangeDeleted, d)
	if d.node != nil {
		d.node.domains--
		if d.power == powerOn {
			d.node.on--
		}
		st.changed(ChangeUpdated, d.node)
	}
	if d.pool != nil {
		d.pool.vdisks -= d.vdisks
		st.changed(ChangeUpdated, d.pool)
	}
}

func (st *state) setPower(d *domain, p int, now time.Time) {
	if d.power == p {
		return
	}
	if d.node != nil && (d.power == powerOn || p == powerOn) {
		if d.power == powerOn {
			d.node.on--
		}
		if p == powerOn {
			d.node.on++
		}
		st.changed(ChangeUpdated, d.node)
	}
	d.power = p
	d.poweredAt = now
	st.changed(ChangeUpdated, d)
}

func (st *state) moveDomain(d *domain, n *node, now time.Time) {
	if d.node == n {
		return
	}
	if d.node != nil {
		d.node.domains--
		if d.power == powerOn {
			d.node.on--
		}
		st.changed(ChangeUpdated, d.node)
	}
	d.node = n
	n.domains++
	if d.power == powerOn {
		n.on++
	}
	d.nodeSince = now
	st.changed(ChangeUpdated, d)
	st.changed(ChangeUpdated, n)
}

// hasThinClones reports whether any VM is a thin clone of d.
func (st *state) hasThinClones(d *domain) bool {
	for _, x := range st.domains {
		if x.thin && x.parent == d {
			return true
		}
	}
	return false
}

func (st *state) sortedByName() []*domain {
	if st.domainsByName == nil {
		st.domainsByName = append([]*domain(nil), st.domains...)
		sort.SliceStable(st.domainsByName, func(i, j int) bool {
			return st.domainsByName[i].name < st.domainsByName[j].name
		})
	}
	return st.domainsByName
}

// uuid draws a version 4 UUID from the seeded source, so ids are reproducible.
func (st *state) uuid() string { return uuidFrom(st.rng) }

func uuidFrom(r *rand.Rand) string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

func round2(f float64) float64 { return float64(int(f*100)) / 100 }

// timeFormat is the platform's timestamp form: UTC with microseconds.
const timeFormat = "2006-01-02T15:04:05.000000Z"

func ts(t time.Time) string { return t.UTC().Format(timeFormat) }
