package collector

// The inventory's gauges: their Descs, made once per view with fixed HELP texts, and emit, one
// function per kind of object, each writing its families one after the other.

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// inventoryDescs are built once per view; the controller is a constant label. The gauges are
// rendered once per snapshot (exposition.Desc); the task families stay live (tasks.go).
type inventoryDescs struct {
	up, controllerInfo *exposition.Desc

	nodeInfo, nodeStatus, nodeCPUs, nodeMemory, nodeCPUUsage, nodeMemUsage, nodeDomains, nodeDomainsRunning *exposition.Desc

	clusterInfo, clusterStatus, clusterCPUs, clusterMemory, clusterNodes, clusterCPUUsage, clusterMemUsage *exposition.Desc

	datapoolInfo, datapoolStatus, datapoolSize, datapoolUsed, datapoolFree *exposition.Desc

	domainInfo, domainStatus, domainPower, domainCPUs, domainMemory, domainCPUUsage, domainMemUsage, domainAgent *exposition.Desc

	domainGuestInfo, lastBackupTime, lastBackupSuccess *exposition.Desc

	vdiskInfo, vdiskProvisioned, vdiskAllocated, vdiskSnapshots, datapoolProvisioned, ifaceInfo, ifaceUp *exposition.Desc

	tasks *exposition.Desc
}

// all lists every Desc, in the order Describe sends them.
func (d *inventoryDescs) all() []*exposition.Desc {
	return []*exposition.Desc{
		d.up, d.controllerInfo,
		d.nodeInfo, d.nodeStatus, d.nodeCPUs, d.nodeMemory, d.nodeCPUUsage, d.nodeMemUsage, d.nodeDomains, d.nodeDomainsRunning,
		d.clusterInfo, d.clusterStatus, d.clusterCPUs, d.clusterMemory, d.clusterNodes, d.clusterCPUUsage, d.clusterMemUsage,
		d.datapoolInfo, d.datapoolStatus, d.datapoolSize, d.datapoolUsed, d.datapoolFree,
		d.domainInfo, d.domainStatus, d.domainPower, d.domainCPUs, d.domainMemory, d.domainCPUUsage, d.domainMemUsage, d.domainAgent,
		d.domainGuestInfo, d.lastBackupTime, d.lastBackupSuccess,
		d.vdiskInfo, d.vdiskProvisioned, d.vdiskAllocated, d.vdiskSnapshots, d.datapoolProvisioned, d.ifaceInfo, d.ifaceUp,
		d.tasks,
	}
}

func newInventoryDescs(controller string) *inventoryDescs {
	cl := prometheus.Labels{"controller": controller}
	// A scrape shows cached data: the HELP says how old it can be and what a failure does.
	const every = " Refreshed in the background every collect.interval"
	const cached = every + "; the last good data is kept while the controller fails."
	d := func(name, help string, labels ...string) *exposition.Desc {
		return exposition.NewDesc(namespace+"_"+name, help+cached, prometheus.GaugeValue, labels, cl)
	}
	// The node and VM families are patched object by object on a pushed change: small blocks.
	return &inventoryDescs{
		up: exposition.NewDesc("veil_up", "1 if the last inventory refresh of the controller succeeded; while it is 0 the inventory series keep the last good data."+every+".", prometheus.GaugeValue, nil, cl),
		controllerInfo: exposition.NewDesc("veil_controller_info",
			"Platform version of the controller (GET /api/controllers/base-version/); value 1. Cached: read at the first inventory refresh, at the first after an outage and then every "+
				strconv.Itoa(inventory.VersionEvery)+"th refresh ("+strconv.Itoa(inventory.VersionEvery)+" × collect.interval); absent where the controller lacks the endpoint (404).",
			prometheus.GaugeValue, []string{"version"}, cl),

		nodeInfo:           d("node_info", "Node description; value 1.", "node_id", "node", "cluster", "management_ip").SmallBlocks(),
		nodeStatus:         d("node_status", "Current status of the node; value 1.", "node_id", "status").SmallBlocks(),
		nodeCPUs:           d("node_cpus", "CPUs of the node.", "node_id").SmallBlocks(),
		nodeMemory:         d("node_memory_bytes", "Memory of the node.", "node_id").SmallBlocks(),
		nodeCPUUsage:       d("node_cpu_usage_ratio", "CPU usage of the node, 0..1.", "node_id").SmallBlocks(),
		nodeMemUsage:       d("node_memory_usage_ratio", "Memory usage of the node, 0..1.", "node_id").SmallBlocks(),
		nodeDomains:        d("node_domains", "VMs on the node.", "node_id").SmallBlocks(),
		nodeDomainsRunning: d("node_domains_running", "Running VMs on the node.", "node_id").SmallBlocks(),

		clusterInfo:     d("cluster_info", "Cluster description; value 1.", "cluster_id", "cluster"),
		clusterStatus:   d("cluster_status", "Current status of the cluster; value 1.", "cluster_id", "status"),
		clusterCPUs:     d("cluster_cpus", "CPUs of the cluster.", "cluster_id"),
		clusterMemory:   d("cluster_memory_bytes", "Memory of the cluster.", "cluster_id"),
		clusterNodes:    d("cluster_nodes", "Nodes in the cluster.", "cluster_id"),
		clusterCPUUsage: d("cluster_cpu_usage_ratio", "CPU usage of the cluster, 0..1.", "cluster_id"),
		clusterMemUsage: d("cluster_memory_usage_ratio", "Memory usage of the cluster, 0..1.", "cluster_id"),

		datapoolInfo:   d("datapool_info", "Datapool description; value 1.", "datapool_id", "datapool", "type"),
		datapoolStatus: d("datapool_status", "Current status of the datapool; value 1.", "datapool_id", "status"),
		datapoolSize:   d("datapool_size_bytes", "Size of the datapool.", "datapool_id"),
		datapoolUsed:   d("datapool_used_bytes", "Used space of the datapool.", "datapool_id"),
		datapoolFree:   d("datapool_free_bytes", "Free space of the datapool.", "datapool_id"),

		domainInfo:     d("domain_info", "VM description; value 1; tags are the VM's tag names, sorted and joined by commas.", "domain_id", "domain", "node_id", "template", "thin", "parent_id", "tags").SmallBlocks(),
		domainStatus:   d("domain_status", "Current status of the VM; value 1.", "domain_id", "status").SmallBlocks(),
		domainPower:    d("domain_power_state", "Current power state of the VM (undefined, off, suspended, on); value 1.", "domain_id", "state").SmallBlocks(),
		domainCPUs:     d("domain_cpus", "vCPUs of the VM.", "domain_id").SmallBlocks(),
		domainMemory:   d("domain_memory_bytes", "Memory of the VM.", "domain_id").SmallBlocks(),
		domainCPUUsage: d("domain_cpu_usage_ratio", "CPU usage of the VM, 0..1, when the platform reports it.", "domain_id").SmallBlocks(),
		domainMemUsage: d("domain_memory_usage_ratio", "Memory usage of the VM, 0..1, when the platform reports it.", "domain_id").SmallBlocks(),
		domainAgent:    d("domain_guest_agent_connected", "1 if the QEMU guest agent of the VM answers the platform.", "domain_id").SmallBlocks(),

		domainGuestInfo: d("domain_guest_info", "Hostname and primary IPv4 address the VM's guest agent reports to the platform (guest_utils of the VM list); value 1, only while the agent reports one of them.", "domain_id", "hostname", "ip").SmallBlocks(),
		lastBackupTime: exposition.NewDesc("veil_domain_last_backup_timestamp_seconds",
			"Unix time the newest successful backup of the VM finished, from the task journal (tasks matching collect.backup_task_pattern; at start read collect.backup_lookback back). Cached: follows the tasks seen finishing at each inventory refresh, every collect.interval.",
			prometheus.GaugeValue, []string{"domain_id"}, cl),
		lastBackupSuccess: exposition.NewDesc("veil_domain_last_backup_success",
			"1 if the newest finished backup of the VM succeeded, 0 if it failed, from the task journal (tasks matching collect.backup_task_pattern; at start read collect.backup_lookback back). Cached: follows the tasks seen finishing at each inventory refresh, every collect.interval.",
			prometheus.GaugeValue, []string{"domain_id"}, cl),

		vdiskInfo: d("vdisk_info", "Virtual disk description from GET /api/vdisks/; value 1; domain_id and domain (the VM's name) are empty for a free disk; bus and type where the list carries target_bus and disk_type or the detail sweep read them (collect.device_details_interval; empty otherwise).",
			"vdisk_id", "vdisk", "domain_id", "domain", "datapool_id", "status", "bus", "type"),
		vdiskProvisioned: d("vdisk_provisioned_bytes", "Size of the virtual disk as the guest sees it (virtual_size), in bytes."+vdiskUnitHelp, "vdisk_id", "domain_id", "datapool_id"),
		vdiskAllocated:   d("vdisk_allocated_bytes", "Space the virtual disk takes on its datapool (size), in bytes."+vdiskUnitHelp, "vdisk_id", "domain_id", "datapool_id"),
		vdiskSnapshots:   d("vdisk_snapshots", "Snapshots of the virtual disk, where the disk list carries them or the detail sweep read them (collect.device_details_interval; absent otherwise).", "vdisk_id", "domain_id", "datapool_id"),
		datapoolProvisioned: d("datapool_provisioned_bytes", "Sum of the virtual sizes of every disk on the datapool (all VMs, free disks too), in bytes: above veil_datapool_size_bytes the pool is thinly overcommitted."+vdiskUnitHelp,
			"datapool_id"),
		ifaceInfo: d("domain_interface_info", "Network interface of a VM from GET /api/vmachine-infs/; value 1.", "domain_id", "interface_id", "interface", "mac", "driver", "network_id", "network"),
		ifaceUp:   d("domain_interface_up", "1 if the link of the VM's network interface is up, 0 if down (link_state); where the interface list carries link_state or the detail sweep read it (collect.device_details_interval; absent otherwise).", "domain_id", "interface_id"),

		tasks: d("tasks", "Tasks of the platform by status.", "status"),
	}
}

const mib = 1 << 20

var powerStates = [...]string{veil.PowerUndefined: "undefined", veil.PowerOff: "off", veil.PowerSuspended: "suspended", veil.PowerOn: "on"}

// emit sends every gauge of the snapshot, one family after the other where a family has a
// series per VM (a render then holds the text of one such family at a time). prev are the VMs
// of the last render (none: not to be kept from): a VM family whose series they show alike is
// kept as rendered, one few of them changed in patched (emitDomains), and with keepDevices the
// device families are kept.
func (v *Inventory) emit(e exposition.Sink, snap *inventory.Snapshot, prev lastRender, keepDevices bool) {
	d := v.descs
	e.Add(d.up, metricutil.Bool(snap.Up))
	if snap.Version != "" {
		e.Add(d.controllerInfo, 1, snap.Version)
	}
	d.emitHosts(e, snap, prev)
	e.Flush()
	sameVMs := d.emitDomains(e, snap, prev)
	d.emitDevices(e, snap, keepDevices)
	if snap.TaskCounts != nil { // tasks read: absent while the collection is off or unavailable
		d.emitBackups(e, snap, sameVMs && prev.backupsShown && prev.backupsGen == snap.BackupsGen)
		for _, s := range inventory.TaskStatuses {
			e.Add(d.tasks, snap.TaskCounts[s], s)
		}
	}
}

// emitHosts sends the families of the nodes, clusters and datapools; those of each kept as
// rendered while it is the last render's (prev).
func (d *inventoryDescs) emitHosts(e exposition.Sink, snap *inventory.Snapshot, prev lastRender) {
	keep := func(same bool, descs ...*exposition.Desc) bool {
		if !prev.hosts || !same || !e.Keep(descs[0]) {
			return false
		}
		for _, d := range descs[1:] {
			e.Keep(d)
		}
		return true
	}
	if !keep(sameBacking(prev.nodes, snap.Nodes), d.nodeInfo, d.nodeStatus, d.nodeCPUs, d.nodeMemory, d.nodeCPUUsage, d.nodeMemUsage, d.nodeDomains, d.nodeDomainsRunning) {
		d.emitNodes(e, snap, prev.nodes, prev.hosts)
	}
	if !keep(sameBacking(prev.clusters, snap.Clusters), d.clusterInfo, d.clusterStatus, d.clusterCPUs, d.clusterMemory, d.clusterNodes, d.clusterCPUUsage, d.clusterMemUsage) {
		d.emitClusters(e, snap)
	}
	if !keep(sameBacking(prev.pools, snap.Datapools), d.datapoolInfo, d.datapoolStatus, d.datapoolSize, d.datapoolUsed, d.datapoolFree) {
		d.emitDatapools(e, snap)
	}
}

func (d *inventoryDescs) emitClusters(e exposition.Sink, snap *inventory.Snapshot) {
	for i := range snap.Clusters {
		c := &snap.Clusters[i]
		e.Add(d.clusterInfo, 1, c.ID, c.VerboseName)
		e.Add(d.clusterStatus, 1, c.ID, c.Status)
		e.Add(d.clusterCPUs, float64(c.CPUCount), c.ID)
		e.Add(d.clusterMemory, float64(c.MemoryCount)*mib, c.ID)
		e.Add(d.clusterNodes, float64(c.NodesCount), c.ID)
		if c.CPUUsedPercentUser != nil {
			e.Add(d.clusterCPUUsage, float64(*c.CPUUsedPercentUser)/100, c.ID)
		}
		if c.MemUsedPercentUser != nil {
			e.Add(d.clusterMemUsage, float64(*c.MemUsedPercentUser)/100, c.ID)
		}
	}
}

func (d *inventoryDescs) emitDatapools(e exposition.Sink, snap *inventory.Snapshot) {
	for i := range snap.Datapools {
		p := &snap.Datapools[i]
		e.Add(d.datapoolInfo, 1, p.ID, p.VerboseName, p.Type)
		e.Add(d.datapoolStatus, 1, p.ID, p.Status)
		e.Add(d.datapoolSize, float64(p.Size)*mib, p.ID)
		e.Add(d.datapoolUsed, float64(p.UsedSpace)*mib, p.ID)
		e.Add(d.datapoolFree, float64(p.FreeSpace)*mib, p.ID)
	}
}

// emitBackups sends the backups families: the VMs the backups know, in the VMs' order. With
// same (the VMs and the backups are the last render's) they are kept as rendered.
func (d *inventoryDescs) emitBackups(e exposition.Sink, snap *inventory.Snapshot, same bool) {
	if same && e.Keep(d.lastBackupTime) && e.Keep(d.lastBackupSuccess) {
		return
	}
	for _, b := range snap.Backups() {
		if !b.Success.IsZero() {
			e.Add(d.lastBackupTime, metricutil.UnixSeconds(b.Success), b.ID)
		}
		e.Add(d.lastBackupSuccess, metricutil.Bool(b.Succeeded), b.ID)
	}
}

func powerState(n veil.Number) string {
	i := int(n)
	if i < 0 || i >= len(powerStates) || float64(i) != float64(n) {
		return powerStates[veil.PowerUndefined]
	}
	return powerStates[i]
}
