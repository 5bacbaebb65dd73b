package veiltest

// This file holds the VMs' devices: virtual disks (GET /api/vdisks/) and network interfaces
// (GET /api/vmachine-infs/), made with their VM, cloned with it and removed with it, plus a few
// free disks on the datapools. They are drawn from a source of their own, so the rest of the
// seeded inventory is the same with or without them. Options.NoDevices serves neither
// collection (404, routes.go), as a controller older than them.
//
// Shapes (platform-facts.md, the vendor's Go client): a disk lists id, verbose_name, status,
// size (a decimal: what it takes on its datapool), virtual_size (an integer: what the guest
// sees), datapool {id, verbose_name, type}, vdisk (the VM using it, {id, verbose_name}, or null)
// and hints; its detail adds snapshots, disk_type, target_bus, driver_cache, shareable, ssd,
// readonly, created, modified, locked_by. Sizes are in GB, the unit of the UI. An interface
// lists id, name, vmachine_info, mac_address, nic_driver, status, vmachine_name and
// vnetwork_info; its detail adds link_state (up, down) and node_info.

import (
	"fmt"
	"net/http"
	"time"
)

type vdisk struct {
	id, name  string
	pool      *datapool
	owner     *domain // nil: a free disk
	virtualGB int
	sizeGB    float64 // allocated; a thin disk takes less than its virtual size
	bus       string
	snapshots []string // ids
	created   time.Time
}

type vnic struct {
	id, name string
	owner    *domain
	mac      string
	driver   string
	network  *vnetwork
	linkUp   bool
	created  time.Time
}

type vnetwork struct{ id, name string }

// vnetworks are the simulator's virtual networks, fixed ids.
var vnetworks = []*vnetwork{
	{"00000000-0000-4000-8000-0000000000e1", "Default"},
	{"00000000-0000-4000-8000-0000000000e2", "prod-net"},
	{"00000000-0000-4000-8000-0000000000e3", "mgmt-net"},
}

// devices is the state's part for disks and interfaces; guarded by Server.mu like the rest.
type devices struct {
	disks    []*vdisk // creation order
	diskByID map[string]*vdisk
	nics     []*vnic // creation order
	nicByID  map[string]*vnic
	byVM     map[*domain]*vmDevices
}

type vmDevices struct {
	disks []*vdisk
	nics  []*vnic
}

// freeDisksPer: one free disk per this many VMs (at least one per datapool).
const freeDisksPer = 20

// addDevices gives d its disks (d.vdisks of them, on its datapool) and one or two interfaces;
// like, when set, is the VM d was cloned from: same disk sizes and networks. It runs inside
// addDomain, before the datapool's count changes.
func (st *state) addDevices(d *domain, like *domain) {
	dv := &st.dev
	r := st.hw
	vm := &vmDevices{}
	dv.byVM[d] = vm
	if d.pool != nil {
		var src []*vdisk
		if like != nil {
			src = dv.byVM[like].disksOrNil()
		}
		for i := range d.vdisks {
			k := &vdisk{id: uuidFrom(r), name: fmt.Sprintf("%s_disk%d", d.name, i+1), pool: d.pool, owner: d, bus: "virtio", created: d.created}
			if i < len(src) {
				k.virtualGB = src[i].virtualGB
			} else if i == 0 {
				k.virtualGB = []int{20, 40, 60, 100}[r.IntN(4)]
			} else {
				k.virtualGB = []int{50, 100, 200, 500}[r.IntN(4)]
			}
			k.sizeGB = allocated(k.virtualGB, d.pool, r.Float64())
			if like != nil && d.thin {
				k.sizeGB = round2(float64(k.virtualGB) * 0.02) // a thin clone holds its own writes only
			}
			if !d.linux && i == 0 {
				k.bus = "sata"
			}
			if r.IntN(5) == 0 {
				for range 1 + r.IntN(3) {
					k.snapshots = append(k.snapshots, uuidFrom(r))
				}
			}
			st.addDisk(k)
			vm.disks = append(vm.disks, k)
		}
	}
	n := 1 + r.IntN(2)
	var srcNICs []*vnic
	if like != nil {
		srcNICs = dv.byVM[like].nicsOrNil()
		n = max(len(srcNICs), 1)
	}
	for i := range n {
		c := &vnic{id: uuidFrom(r), name: fmt.Sprintf("net%d", i), owner: d, driver: "virtio", created: d.created,
			network: vnetworks[min(i, len(vnetworks)-1)], linkUp: r.IntN(8) != 0}
		c.mac = fmt.Sprintf("52:54:00:%02x:%02x:%02x", r.IntN(256), r.IntN(256), r.IntN(256))
		if i < len(srcNICs) {
			c.network, c.driver = srcNICs[i].network, srcNICs[i].driver
		} else if !d.linux && r.IntN(2) == 0 {
			c.driver = "e1000"
		}
		if i > 0 && r.IntN(3) == 0 {
			c.network = vnetworks[2]
		}
		dv.nics = append(dv.nics, c)
		dv.nicByID[c.id] = c
		vm.nics = append(vm.nics, c)
	}
}

func (v *vmDevices) disksOrNil() []*vdisk {
	if v == nil {
		return nil
	}
	return v.disks
}

func (v *vmDevices) nicsOrNil() []*vnic {
	if v == nil {
		return nil
	}
	return v.nics
}

// allocated is what a disk of virtualGB takes on p: all of it on an lvm pool (thick), a share
// of it on the others (thin), two decimals.
func allocated(virtualGB int, p *datapool, draw float64) float64 {
	if p.typ == "lvm" {
		return float64(virtualGB)
	}
	return round2(float64(virtualGB) * (0.05 + 0.9*draw))
}

func (st *state) addDisk(k *vdisk) {
	st.dev.disks = append(st.dev.disks, k)
	st.dev.diskByID[k.id] = k
}

// removeDevices drops d's disks and interfaces with it (the datapool's count is removeDomain's).
func (st *state) removeDevices(d *domain) {
	dv := &st.dev
	vm := dv.byVM[d]
	if vm == nil {
		return
	}
	delete(dv.byVM, d)
	gone := make(map[string]bool, len(vm.disks)+len(vm.nics))
	for _, k := range vm.disks {
		gone[k.id] = true
		delete(dv.diskByID, k.id)
	}
	for _, c := range vm.nics {
		gone[c.id] = true
		delete(dv.nicByID, c.id)
	}
	if len(vm.disks) > 0 {
		dv.disks = dropIDs(dv.disks, gone, func(k *vdisk) string { return k.id })
	}
	dv.nics = dropIDs(dv.nics, gone, func(c *vnic) string { return c.id })
}

func dropIDs[T any](xs []T, gone map[string]bool, id func(T) string) []T {
	out := xs[:0]
	for _, x := range xs {
		if !gone[id(x)] {
			out = append(out, x)
		}
	}
	clear(xs[len(out):])
	return out
}

// seedFreeDisks puts the free disks on the datapools, round robin, once the VMs are made.
func (st *state) seedFreeDisks(created time.Time) {
	if len(st.pools) == 0 {
		return
	}
	n := max(len(st.domains)/freeDisksPer, len(st.pools))
	for i := range n {
		p := st.pools[i%len(st.pools)]
		k := &vdisk{id: uuidFrom(st.hw), name: fmt.Sprintf("free-disk-%03d", i+1), pool: p, bus: "virtio", created: created,
			virtualGB: []int{10, 50, 100}[st.hw.IntN(3)]}
		k.sizeGB = allocated(k.virtualGB, p, st.hw.Float64())
		st.addDisk(k)
		p.vdisks++
	}
}

type poolRefJSON struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
	Type        string `json:"type"`
}

type vdiskJSON struct {
	ID          string      `json:"id"`
	VerboseName string      `json:"verbose_name"`
	Status      string      `json:"status"`
	Size        float64     `json:"size"`
	VirtualSize int         `json:"virtual_size"`
	Datapool    poolRefJSON `json:"datapool"`
	VM          *ref        `json:"vdisk"` // the VM using the disk, under this key on the platform
	Hints       int         `json:"hints"`
}

type snapshotJSON struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Vdisk  string `json:"vdisk"`
	Serial string `json:"serial"`
}

type vdiskDetailJSON struct {
	vdiskJSON
	Description string         `json:"description"`
	EntityType  string         `json:"entity_type"`
	Snapshots   []snapshotJSON `json:"snapshots"`
	DiskType    string         `json:"disk_type"`
	TargetBus   string         `json:"target_bus"`
	DriverCache string         `json:"driver_cache"`
	Shareable   bool           `json:"shareable"`
	SSD         bool           `json:"ssd"`
	ReadOnly    bool           `json:"readonly"`
	Created     string         `json:"created"`
	Modified    string         `json:"modified"`
	LockedBy    *string        `json:"locked_by"`
	Permissions []string       `json:"permissions"`
}

func (k *vdisk) wire() vdiskJSON {
	j := vdiskJSON{ID: k.id, VerboseName: k.name, Status: "ACTIVE", Size: k.sizeGB, VirtualSize: k.virtualGB,
		Datapool: poolRefJSON{k.pool.id, k.pool.name, k.pool.typ}}
	if k.owner != nil {
		j.VM = &ref{k.owner.id, k.owner.name}
	}
	return j
}

func (k *vdisk) detail() vdiskDetailJSON {
	j := vdiskDetailJSON{vdiskJSON: k.wire(), EntityType: "vdisks", Snapshots: []snapshotJSON{}, DiskType: "qcow2",
		TargetBus: k.bus, DriverCache: "none", Created: ts(k.created), Modified: ts(k.created),
		Permissions: []string{"view", "update", "remove"}}
	for i, id := range k.snapshots {
		j.Snapshots = append(j.Snapshots, snapshotJSON{ID: id, Source: fmt.Sprintf("/storages/%s/%s.qcow2", k.pool.id, id),
			Vdisk: k.id, Serial: fmt.Sprintf("snap-%d", i+1)})
	}
	return j
}

type vnetworkJSON struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
	EntityType  string `json:"entity_type"`
}

type vnicJSON struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	VM           ref          `json:"vmachine_info"`
	MACAddress   string       `json:"mac_address"`
	NICDriver    string       `json:"nic_driver"`
	Status       string       `json:"status"`
	VMName       string       `json:"vmachine_name"`
	VnetworkInfo vnetworkJSON `json:"vnetwork_info"`
}

type vnicDetailJSON struct {
	vnicJSON
	Description string   `json:"description"`
	EntityType  string   `json:"entity_type"`
	LinkState   string   `json:"link_state"`
	NodeInfo    *ref     `json:"node_info"`
	Created     string   `json:"created"`
	Modified    string   `json:"modified"`
	LockedBy    *string  `json:"locked_by"`
	Permissions []string `json:"permissions"`
}

func (c *vnic) wire() vnicJSON {
	return vnicJSON{ID: c.id, Name: c.name, VM: ref{c.owner.id, c.owner.name}, MACAddress: c.mac, NICDriver: c.driver,
		Status: "ACTIVE", VMName: c.owner.name, VnetworkInfo: vnetworkJSON{c.network.id, c.network.name, "vnetworks"}}
}

func (c *vnic) detail() vnicDetailJSON {
	j := vnicDetailJSON{vnicJSON: c.wire(), EntityType: "vmachineinfs", LinkState: "up", Created: ts(c.created),
		Modified: ts(c.created), Permissions: []string{"view", "update", "remove"}}
	if !c.linkUp {
		j.LinkState = "down"
	}
	if n := c.owner.node; n != nil {
		j.NodeInfo = &ref{n.id, n.name}
	}
	return j
}

// selection is what a listing answers: the objects selected, and how one is put on the wire.
type selection[T any] struct {
	items []T
	wire  func(T) any
}

// listSelected answers one page of the selection (in the collection's order) or, with
// ordering, of all of it sorted; wire runs under s.mu (held on entry, released here), the
// encoding after.
func listSelected[T any](s *Server, w http.ResponseWriter, r *http.Request, p pageReq, selected selection[T]) {
	sel, wire := selected.items, selected.wire
	ordering := r.URL.Query().Get("ordering")
	if ordering != "" {
		vs := wireAll(sel, wire)
		s.mu.Unlock()
		writeOrdered(w, r, p, encodeAll(vs), ordering)
		return
	}
	lo, hi := p.window(len(sel))
	vs := wireAll(sel[lo:hi], wire)
	s.mu.Unlock()
	writePage(w, r, len(sel), p, encodeAll(vs))
}

func (s *Server) listVdisks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	poolF, byPool := filter(q, "datapool")
	vmF, byVM := filter(q, "domain")
	s.mu.Lock()
	s.st.advance(s.now())
	sel := s.st.dev.disks
	if byPool || byVM {
		sel = nil
		for _, k := range s.st.dev.disks {
			if (!byPool || k.pool.id == poolF) && (!byVM || k.owner != nil && k.owner.id == vmF) {
				sel = append(sel, k)
			}
		}
	}
	listSelected(s, w, r, p, selection[*vdisk]{sel, func(k *vdisk) any { return k.wire() }})
}

func (s *Server) getVdisk(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Virtual disk is not found.", "Виртуальный диск не найден."), func(now time.Time) (any, bool) {
		s.st.advance(now)
		k, ok := s.st.dev.diskByID[id]
		if !ok {
			return nil, false
		}
		return k.detail(), true
	})
}

func (s *Server) listVMachineInfs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := parsePaging(q)
	if e != nil {
		writeError(w, e)
		return
	}
	vmF, byVM := filter(q, "domain")
	s.mu.Lock()
	s.st.advance(s.now())
	sel := s.st.dev.nics
	if byVM {
		sel = nil
		for _, c := range s.st.dev.nics {
			if c.owner.id == vmF {
				sel = append(sel, c)
			}
		}
	}
	listSelected(s, w, r, p, selection[*vnic]{sel, func(c *vnic) any { return c.wire() }})
}

func (s *Server) getVMachineInf(w http.ResponseWriter, r *http.Request, id string) {
	s.detail(w, txt("Network interface is not found.", "Сетевой интерфейс не найден."), func(now time.Time) (any, bool) {
		s.st.advance(now)
		c, ok := s.st.dev.nicByID[id]
		if !ok {
			return nil, false
		}
		return c.detail(), true
	})
}
