package veiltest

// This file holds the wire encodings of the inventory: nodes, clusters, datapools and domains
// as lists and details show them, in both profiles.

import (
	"encoding/json"
	"time"
)

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
	Tags               any    `json:"tags"` // {colour, verbose_name} objects, or strings in the alternative profile
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

// tags: a few VMs (by their number, not the seeded source) carry tags, as {colour,
// verbose_name} objects, which the vendor's Go client requires, or, in the alternative profile,
// as strings.
func (d *domain) tags() any {
	var names []string
	if d.seq%5 == 0 {
		names = append(names, "prod")
	}
	if d.seq%7 == 0 {
		names = append(names, "backup-daily")
	}
	if d.tagsSet {
		names = d.tagNames
	}
	if d.alt {
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
