package veiltest

import (
	"encoding/hex"
	"encoding/json"
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

	listJSON []byte // cached list encoding; nil when stale
}

func (d *domain) agentActive() bool { return d.agent && d.agentUp && d.power == 3 }

func (d *domain) touch() { d.listJSON = nil }

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

func (st *state) addDomain(d *domain) {
	if d.template {
		d.power = powerOff
	}
	st.domains = append(st.domains, d)
	st.domainByID[d.id] = d
	st.domainsByName = nil
	if d.node != nil {
		d.node.domains++
		if d.power == powerOn {
			d.node.on++
		}
	}
	if d.pool != nil {
		d.pool.vdisks += d.vdisks
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
	if d.node != nil {
		d.node.domains--
		if d.power == powerOn {
			d.node.on--
		}
	}
	if d.pool != nil {
		d.pool.vdisks -= d.vdisks
	}
}

func (st *state) setPower(d *domain, p int, now time.Time) {
	if d.power == p {
		return
	}
	if d.node != nil {
		if d.power == powerOn {
			d.node.on--
		}
		if p == powerOn {
			d.node.on++
		}
	}
	d.power = p
	d.poweredAt = now
	d.touch()
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
	}
	d.node = n
	n.domains++
	if d.power == powerOn {
		n.on++
	}
	d.nodeSince = now
	d.touch()
}

// thinClones reports whether any VM is a thin clone of d.
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

// ---- wire encodings ----

type ref struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
}

type nodeJSON struct {
	ID             string `json:"id"`
	VerboseName    string `json:"verbose_name"`
	CPUCount       int    `json:"cpu_count"`
	MemoryCount    int    `json:"memory_count"`
	Status         string `json:"status"`
	ManagementIP   string `json:"management_ip"`
	DomainsCount   int    `json:"domains_count"`
	DomainsOnCount int    `json:"domains_on_count"`
	Cluster        any    `json:"cluster"`
	DatacenterName string `json:"datacenter_name"`
	DatacenterID   string `json:"datacenter_id"`
	CPUUsed        any    `json:"cpu_used_percent_user"`
	MemUsed        any    `json:"mem_used_percent_user"`
}

type nodeDetailJSON struct {
	nodeJSON
	Version     string         `json:"version"`
	Ballooning  bool           `json:"ballooning"`
	Uptime      map[string]any `json:"uptime"`
	CPUTopology map[string]any `json:"cpu_topology"`
	Created     string         `json:"created"`
	Modified    string         `json:"modified"`
}

const datacenterID = "00000000-0000-4000-8000-00000000dc01"

func (n *node) wire() nodeJSON {
	j := nodeJSON{
		ID: n.id, VerboseName: n.name, CPUCount: n.cpus, MemoryCount: n.memMiB, Status: n.status,
		ManagementIP: n.ip, DomainsCount: n.domains, DomainsOnCount: n.on,
		Cluster:        ref{n.cluster.id, n.cluster.name},
		DatacenterName: "Default datacenter", DatacenterID: datacenterID,
		CPUUsed: percent(n.cpuPct, n.stringPct), MemUsed: percent(n.memPct, n.stringPct),
	}
	return j
}

func (n *node) detail(now time.Time) nodeDetailJSON {
	j := nodeDetailJSON{nodeJSON: n.wire(), Version: "4.7.5", Ballooning: n.ballooning,
		Created: ts(n.created), Modified: ts(n.created)}
	j.Cluster = n.cluster.id
	up := now.Sub(n.created)
	j.Uptime = map[string]any{"uptime": int(up.Seconds()), "start_time": ts(n.created),
		"system_time": ts(now), "timezone": "Europe/Moscow"}
	j.CPUTopology = map[string]any{"cpu_count": n.cpus, "cpu_sockets": 2, "cpu_cores": n.cpus / 4,
		"cpu_threads": 2, "cpu_model": "Intel(R) Xeon(R) Gold 6230R CPU @ 2.10GHz", "cpu_mhz_all": 2100 * n.cpus}
	return j
}

type clusterJSON struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
	CPUCount    int    `json:"cpu_count"`
	MemoryCount int    `json:"memory_count"`
	NodesCount  int    `json:"nodes_count"`
	Status      string `json:"status"`
	CPUUsed     any    `json:"cpu_used_percent_user"`
	MemUsed     any    `json:"mem_used_percent_user"`
	Created     string `json:"created,omitempty"`
}

func (st *state) clusterWire(c *cluster, detail bool) clusterJSON {
	j := clusterJSON{ID: c.id, VerboseName: c.name, Status: c.status}
	var cpu, mem float64
	for _, n := range st.nodes {
		if n.cluster != c {
			continue
		}
		j.NodesCount++
		j.CPUCount += n.cpus
		j.MemoryCount += n.memMiB
		cpu += n.cpuPct * float64(n.cpus)
		mem += n.memPct * float64(n.memMiB)
	}
	var cpuPct, memPct float64
	if j.CPUCount > 0 {
		cpuPct = round2(cpu / float64(j.CPUCount))
		memPct = round2(mem / float64(j.MemoryCount))
	}
	j.CPUUsed, j.MemUsed = percent(cpuPct, !st.opts.PercentNumbers), percent(memPct, !st.opts.PercentNumbers)
	if detail {
		j.Created = ts(c.created)
	}
	return j
}

type poolJSON struct {
	ID             string           `json:"id"`
	VerboseName    string           `json:"verbose_name"`
	Status         string           `json:"status"`
	Type           string           `json:"type"`
	Size           int              `json:"size"`
	UsedSpace      int              `json:"used_space"`
	FreeSpace      int              `json:"free_space"`
	NodesConnected []map[string]any `json:"nodes_connected"`
	VdiskCount     int              `json:"vdisk_count"`
	FileCount      int              `json:"file_count"`
	IsoCount       int              `json:"iso_count"`
}

func (st *state) poolWire(p *datapool) poolJSON {
	j := poolJSON{ID: p.id, VerboseName: p.name, Status: p.status, Type: p.typ, Size: p.sizeMiB,
		UsedSpace: p.used, FreeSpace: p.sizeMiB - p.used, VdiskCount: p.vdisks, FileCount: p.files,
		IsoCount: p.isos, NodesConnected: []map[string]any{}}
	for _, n := range st.poolNodes(p) {
		j.NodesConnected = append(j.NodesConnected, map[string]any{"id": n.id, "verbose_name": n.name, "connection_status": "SUCCESS"})
	}
	return j
}

// poolNodes are the nodes a datapool is connected to: a local pool lives on the first node.
func (st *state) poolNodes(p *datapool) []*node {
	if p.typ == "local" && len(st.nodes) > 0 {
		return st.nodes[:1]
	}
	return st.nodes
}

type guestUtilsJSON struct {
	VeilState  bool     `json:"veil_state"`
	Version    string   `json:"version"`
	Hostname   string   `json:"hostname"`
	IPv4       []string `json:"ipv4"`
	Interfaces []string `json:"interfaces"`
	QemuState  bool     `json:"qemu_state"`
}

type domainJSON struct {
	ID                 string `json:"id"`
	VerboseName        string `json:"verbose_name"`
	MemoryCount        int    `json:"memory_count"`
	CPUCount           int    `json:"cpu_count"`
	Status             string `json:"status"`
	UserPowerState     int    `json:"user_power_state"`
	Node               *ref   `json:"node"`
	Parent             *ref   `json:"parent"`
	Template           bool   `json:"template"`
	Thin               bool   `json:"thin"`
	ResourcePool       *ref   `json:"resource_pool"` // null, or an object in the alternative profile
	GuestUtils         any    `json:"guest_utils"`
	CPUUsedPercentUser any    `json:"cpu_used_percent_user"`
	MemUsedPercentUser any    `json:"mem_used_percent_user"`
	VdisksCount        int    `json:"vdisks_count"`
	Tags               any    `json:"tags"` // strings, or {colour, verbose_name} in the alternative profile
}

type domainDetailJSON struct {
	domainJSON
	OSType              string `json:"os_type"`
	OSVersion           string `json:"os_version"`
	UptimeOnCurrentNode any    `json:"uptime_on_current_node"` // seconds, or an object (alternative)
	UptimeTotal         int    `json:"uptime_total"`
	Cluster             string `json:"cluster"`
	Datapool            *ref   `json:"datapool"`
	Created             string `json:"created"`
	Permissions         any    `json:"permissions"` // an array, or an object (alternative)
	CPUTopology         any    `json:"cpu_topology,omitempty"`
}

func (d *domain) wire() domainJSON {
	j := domainJSON{ID: d.id, VerboseName: d.name, MemoryCount: d.memMiB, CPUCount: d.cpus,
		Status: d.status, UserPowerState: d.power, Template: d.template, Thin: d.thin,
		GuestUtils: struct{}{}, VdisksCount: d.vdisks, Tags: d.tags()}
	if d.alt {
		j.ResourcePool = &ref{resourcePoolID, "Default resource pool"}
	}
	var cpu, mem float64
	if d.node != nil {
		j.Node = &ref{d.node.id, d.node.name}
	}
	if d.parent != nil {
		j.Parent = &ref{d.parent.id, d.parent.name}
	}
	if d.power == powerOn {
		cpu, mem = d.cpuPct, d.memPct
	}
	j.CPUUsedPercentUser, j.MemUsedPercentUser = percent(cpu, !d.pctNumbers), percent(mem, !d.pctNumbers)
	if d.agent {
		j.GuestUtils = guestUtilsJSON{Version: "101.1.0", Hostname: d.hostname(),
			IPv4: []string{d.ipv4}, Interfaces: []string{d.iface()}, QemuState: d.agentActive()}
	}
	return j
}

func (d *domain) listBytes() []byte {
	if d.listJSON == nil {
		d.listJSON, _ = json.Marshal(d.wire())
	}
	return d.listJSON
}

// resourcePoolID is the one resource pool of the alternative profile.
const resourcePoolID = "00000000-0000-4000-8000-0000000000a1"

// tags: a few VMs (by their number, not the seeded source) carry tags, as strings or, in the
// alternative profile, as {colour, verbose_name} objects.
func (d *domain) tags() any {
	var names []string
	if d.seq%5 == 0 {
		names = append(names, "prod")
	}
	if d.seq%7 == 0 {
		names = append(names, "backup-daily")
	}
	if !d.alt {
		if names == nil {
			return []string{}
		}
		return names
	}
	objs := make([]map[string]string, len(names))
	for i, n := range names {
		objs[i] = map[string]string{"colour": []string{"#4caf50", "#2196f3"}[i%2], "verbose_name": n}
	}
	return objs
}

var domainPermissions = []string{"view", "update", "remove", "start", "shutdown", "clone", "backup"}

// detail is the domain detail. The alternative profile (Options.Profile) sends the detail
// objects the vendor's mock shows: uptime_on_current_node {start_time, uptime, system_time},
// cpu_topology.cpu_count without a top-level cpu_count, permissions as an object.
func (d *domain) detail(now time.Time) any {
	j := d.detailJSON(now)
	if !d.alt {
		return j
	}
	j.CPUTopology = map[string]any{"cpu_count": d.cpus, "cpu_sockets": 1, "cpu_cores": d.cpus, "cpu_threads": 1}
	up := 0
	start := now
	if d.power == powerOn {
		start = later(d.poweredAt, d.nodeSince)
		up = int(now.Sub(start).Seconds())
	}
	j.UptimeOnCurrentNode = map[string]any{"start_time": ts(start), "uptime": up, "system_time": ts(now)}
	perms := map[string]bool{}
	for _, p := range domainPermissions {
		perms[p] = true
	}
	j.Permissions = perms
	b, _ := json.Marshal(j)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	delete(m, "cpu_count")
	return m
}

func (d *domain) detailJSON(now time.Time) domainDetailJSON {
	j := domainDetailJSON{domainJSON: d.wire(), OSType: "Linux", OSVersion: "Ubuntu 22.04", Created: ts(d.created),
		UptimeOnCurrentNode: 0, Permissions: domainPermissions}
	if !d.linux {
		j.OSType, j.OSVersion = "Windows", "Windows Server 2019"
	}
	if d.node != nil {
		j.Cluster = d.node.cluster.id
	}
	if d.pool != nil {
		j.Datapool = &ref{d.pool.id, d.pool.name}
	}
	if d.power == powerOn {
		j.UptimeTotal = int(now.Sub(d.poweredAt).Seconds())
		j.UptimeOnCurrentNode = int(now.Sub(later(d.poweredAt, d.nodeSince)).Seconds())
	}
	return j
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (d *domain) hostname() string { return d.name + ".sim.local" }

func (d *domain) iface() string {
	if d.linux {
		return "eth0"
	}
	return "Ethernet"
}
