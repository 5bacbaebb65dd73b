package collector

// The inventory's gauges: each family declared once per view (family: its Desc with a fixed
// HELP text, and the series of an object), and emit, which writes them family after family,
// keeping or patching what the last render's snapshot shows alike.

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
	"github.com/veil-exporter/veil-exporter/inventory"
	"github.com/veil-exporter/veil-exporter/veil"
)

// inventoryFamilies are the inventory's families of one view, each declared once (family):
// built once per view, the controller a constant label. The gauges are rendered once per
// snapshot (exposition.Desc); the task families stay live (tasks.go).
type inventoryFamilies struct {
	up, controllerInfo *exposition.Desc

	nodes    []family[veil.Node]
	clusters []family[veil.Cluster]
	pools    []family[veil.Datapool]
	domains  []family[veil.Domain]
	backups  []family[inventory.DomainBackup]

	vdisks              []rowFamily[inventory.Vdisk]
	datapoolProvisioned *exposition.Desc
	ifaces              []rowFamily[inventory.Interface]

	tasks *exposition.Desc
}

// all lists every Desc, in the order Describe sends them.
func (f *inventoryFamilies) all() []*exposition.Desc {
	out := []*exposition.Desc{f.up, f.controllerInfo}
	out = append(out, descs(f.nodes)...)
	out = append(out, descs(f.clusters)...)
	out = append(out, descs(f.pools)...)
	out = append(out, descs(f.domains)...)
	out = append(out, descs(f.backups)...)
	out = append(out, descs(rowsOf(f.vdisks))...)
	out = append(out, f.datapoolProvisioned)
	out = append(out, descs(rowsOf(f.ifaces))...)
	return append(out, f.tasks)
}

// gaugeDesc makes the Desc of an inventory gauge: its name without "veil_", its HELP (which
// gets how old the data may be appended) and its variable labels.
type gaugeDesc func(name, help string, labels ...string) *exposition.Desc

func newInventoryFamilies(controller string) *inventoryFamilies {
	cl := prometheus.Labels{"controller": controller}
	// A scrape shows cached data: the HELP says how old it can be and what a failure does.
	const every = " Refreshed in the background every collect.interval"
	const cached = every + "; the last good data is kept while the controller fails."
	d := gaugeDesc(func(name, help string, labels ...string) *exposition.Desc {
		return exposition.NewDesc(namespace+"_"+name, help+cached, prometheus.GaugeValue, labels, cl)
	})
	f := &inventoryFamilies{
		up: exposition.NewDesc("veil_up", "1 if the last inventory refresh of the controller succeeded; while it is 0 the inventory series keep the last good data."+every+".", prometheus.GaugeValue, nil, cl),
		controllerInfo: exposition.NewDesc("veil_controller_info",
			"Platform version of the controller (GET /api/controllers/base-version/); value 1. Cached: read at the first inventory refresh, at the first after an outage and then every "+
				strconv.Itoa(inventory.VersionEvery)+"th refresh ("+strconv.Itoa(inventory.VersionEvery)+" × collect.interval); absent where the controller lacks the endpoint (404).",
			prometheus.GaugeValue, []string{"version"}, cl),
		nodes:    nodeFamilies(d),
		clusters: clusterFamilies(d),
		pools:    datapoolFamilies(d),
		domains:  domainFamilies(d),
		backups:  backupFamilies(cl),
		vdisks:   vdiskFamilies(d),
		datapoolProvisioned: d("datapool_provisioned_bytes", "Sum of the virtual sizes of every disk on the datapool (all VMs, free disks too), in bytes: above veil_datapool_size_bytes the pool is thinly overcommitted."+vdiskUnitHelp,
			"datapool_id"),
		ifaces: interfaceFamilies(d),
		tasks:  d("tasks", "Tasks of the platform by status.", "status"),
	}
	if len(f.nodes) > maxFamilies || len(f.domains) > maxFamilies {
		panic("collector: more families of one kind than a change has bits for")
	}
	return f
}

// clusterFamilies are the cluster families.
func clusterFamilies(d gaugeDesc) []family[veil.Cluster] {
	return []family[veil.Cluster]{
		{d("cluster_info", "Cluster description; value 1.", "cluster_id", "cluster"),
			func(c *veil.Cluster, s *sample) { s.set(1, c.ID, c.VerboseName) }},
		{d("cluster_status", "Current status of the cluster; value 1.", "cluster_id", "status"),
			func(c *veil.Cluster, s *sample) { s.set(1, c.ID, c.Status) }},
		{d("cluster_cpus", "CPUs of the cluster.", "cluster_id"),
			func(c *veil.Cluster, s *sample) { s.set(float64(c.CPUCount), c.ID) }},
		{d("cluster_memory_bytes", "Memory of the cluster.", "cluster_id"),
			func(c *veil.Cluster, s *sample) { s.set(float64(c.MemoryCount)*mib, c.ID) }},
		{d("cluster_nodes", "Nodes in the cluster.", "cluster_id"),
			func(c *veil.Cluster, s *sample) { s.set(float64(c.NodesCount), c.ID) }},
		{d("cluster_cpu_usage_ratio", "CPU usage of the cluster, 0..1.", "cluster_id"),
			func(c *veil.Cluster, s *sample) { setRatio(s, c.CPUUsedPercentUser, c.ID) }},
		{d("cluster_memory_usage_ratio", "Memory usage of the cluster, 0..1.", "cluster_id"),
			func(c *veil.Cluster, s *sample) { setRatio(s, c.MemUsedPercentUser, c.ID) }},
	}
}

// datapoolFamilies are the datapool families (veil_datapool_provisioned_bytes is a device
// family: the disks make it).
func datapoolFamilies(d gaugeDesc) []family[veil.Datapool] {
	return []family[veil.Datapool]{
		{d("datapool_info", "Datapool description; value 1.", "datapool_id", "datapool", "type"),
			func(p *veil.Datapool, s *sample) { s.set(1, p.ID, p.VerboseName, p.Type) }},
		{d("datapool_status", "Current status of the datapool; value 1.", "datapool_id", "status"),
			func(p *veil.Datapool, s *sample) { s.set(1, p.ID, p.Status) }},
		{d("datapool_size_bytes", "Size of the datapool.", "datapool_id"),
			func(p *veil.Datapool, s *sample) { s.set(float64(p.Size)*mib, p.ID) }},
		{d("datapool_used_bytes", "Used space of the datapool.", "datapool_id"),
			func(p *veil.Datapool, s *sample) { s.set(float64(p.UsedSpace)*mib, p.ID) }},
		{d("datapool_free_bytes", "Free space of the datapool.", "datapool_id"),
			func(p *veil.Datapool, s *sample) { s.set(float64(p.FreeSpace)*mib, p.ID) }},
	}
}

// backupFamilies are the families of the VMs' last backups (their HELP says their own
// freshness: they follow the task journal).
func backupFamilies(cl prometheus.Labels) []family[inventory.DomainBackup] {
	return []family[inventory.DomainBackup]{
		{exposition.NewDesc("veil_domain_last_backup_timestamp_seconds",
			"Unix time the newest successful backup of the VM finished, from the task journal (tasks matching collect.backup_task_pattern; at start read collect.backup_lookback back). Cached: follows the tasks seen finishing at each inventory refresh, every collect.interval.",
			prometheus.GaugeValue, []string{"domain_id"}, cl),
			func(b *inventory.DomainBackup, s *sample) {
				if !b.Success.IsZero() {
					s.set(metricutil.UnixSeconds(b.Success), b.ID)
				}
			}},
		{exposition.NewDesc("veil_domain_last_backup_success",
			"1 if the newest finished backup of the VM succeeded, 0 if it failed, from the task journal (tasks matching collect.backup_task_pattern; at start read collect.backup_lookback back). Cached: follows the tasks seen finishing at each inventory refresh, every collect.interval.",
			prometheus.GaugeValue, []string{"domain_id"}, cl),
			func(b *inventory.DomainBackup, s *sample) { s.set(metricutil.Bool(b.Succeeded), b.ID) }},
	}
}

// setRatio sets a usage in percent as a ratio, where the platform reports it.
func setRatio(s *sample, percent *veil.Number, id string) {
	if percent != nil {
		s.set(float64(*percent)/100, id)
	}
}

const mib = 1 << 20

var powerStates = [...]string{veil.PowerUndefined: "undefined", veil.PowerOff: "off", veil.PowerSuspended: "suspended", veil.PowerOn: "on"}

// render adds the series of snap to e: every family kept, patched or emitted whole against the
// snapshot the Set e replaces was rendered from (e.Previous), which e's Set then replaces with
// snap. The render state is that Set's: nothing here or in the view remembers a render.
func (f *inventoryFamilies) render(e exposition.Sink, snap *inventory.Snapshot) {
	prev, _ := e.Previous().(*inventory.Snapshot)
	e.Rendering(snap)
	f.emit(e, snap, prev)
}

// emit sends every gauge of snap, one family after the other where a family has a series per
// VM (a render then holds the text of one such family at a time). prev is the snapshot of the
// last render (nil: nothing to keep from): a family whose series it shows alike is kept as
// rendered, one few objects changed in patched (emitDomains, emitNodes), and the device
// families kept while nothing they are made of changed.
func (f *inventoryFamilies) emit(e exposition.Sink, snap, prev *inventory.Snapshot) {
	e.Add(f.up, metricutil.Bool(snap.Up))
	if snap.Version != "" {
		e.Add(f.controllerInfo, 1, snap.Version)
	}
	f.emitHosts(e, snap, prev)
	e.Flush()
	sameVMs := f.emitDomains(e, snap, prev)
	f.emitDevices(e, snap, prev != nil && prev.DevicesGen == snap.DevicesGen)
	if snap.TaskCounts != nil { // tasks read: absent while the collection is off or unavailable
		f.emitBackups(e, snap, sameVMs && prev.TaskCounts != nil && prev.BackupsGen == snap.BackupsGen)
		for _, s := range inventory.TaskStatuses {
			e.Add(f.tasks, snap.TaskCounts[s], s)
		}
	}
}

// emitHosts sends the families of the nodes, clusters and datapools; those of each kept as
// rendered while they are the last render's (a snapshot's slices are never changed once
// stored, a push copies one at its first edit: the same memory is the same contents).
func (f *inventoryFamilies) emitHosts(e exposition.Sink, snap, prev *inventory.Snapshot) {
	if prev == nil || !sameBacking(prev.Nodes, snap.Nodes) || !keepAll(e, f.nodes) {
		f.emitNodes(e, snap, prev)
	}
	if prev == nil || !sameBacking(prev.Clusters, snap.Clusters) || !keepAll(e, f.clusters) {
		addAll(e, f.clusters, snap.Clusters)
	}
	if prev == nil || !sameBacking(prev.Datapools, snap.Datapools) || !keepAll(e, f.pools) {
		addAll(e, f.pools, snap.Datapools)
	}
}

// sameBacking says whether two slices are the same memory: then their elements are equal.
func sameBacking[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// emitBackups sends the backups families: the VMs the backups know, in the VMs' order. With
// same (the VMs and the backups are the last render's) they are kept as rendered.
func (f *inventoryFamilies) emitBackups(e exposition.Sink, snap *inventory.Snapshot, same bool) {
	if same && keepAll(e, f.backups) {
		return
	}
	addAll(e, f.backups, snap.Backups())
}

func powerState(n veil.Number) string {
	i := int(n)
	if i < 0 || i >= len(powerStates) || float64(i) != float64(n) {
		return powerStates[veil.PowerUndefined]
	}
	return powerStates[i]
}
