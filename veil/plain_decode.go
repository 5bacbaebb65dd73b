package veil

// decodePagePlain: the pages of the large listings (domains, disks, interfaces, the event
// journal) read in one pass by plainScanner, with each field set as encoding/json sets it. At
// 10,000 VMs a refresh decodes some 45,000 objects; encoding/json validated every page, scanned
// it again and set each field by reflection, and that was most of a refresh's CPU time. A page
// or an object of any other shape (a repeated or differently cased envelope key, an escaped
// member name, a field of an unexpected type, a detail-only field) is reported as not plain and
// decoded by encoding/json as before, so the result is always the one it gives.

import (
	"encoding/json"
	"strconv"
)

// plainDecoder is a *T that can read itself from the scanner.
type plainDecoder interface{ decodePlain(s *plainScanner) bool }

// decodePagePlain decodes a page whose envelope is {"count": number, "next": ..., "previous":
// ..., "results": [...]} (each key at most once, exactly so named) and whose every result its
// type reads plainly; ok is false for anything else. Raw results (json.RawMessage) are the
// results' bytes within body, not copies.
func decodePagePlain[T any](body []byte) (Page[T], bool) {
	var zero T
	_, isRaw := any(zero).(json.RawMessage)
	if _, ok := any(&zero).(plainDecoder); !ok && !isRaw {
		return Page[T]{}, false
	}
	s := plainScanner{b: body}
	var results []T
	var count float64
	haveCount, n := false, 0
	if !s.enter() {
		return Page[T]{}, false
	}
	for s.member(&n) {
		switch string(s.key) {
		case "count":
			start := s.i
			if haveCount || !s.skipNumber() {
				return Page[T]{}, false
			}
			f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
			if err != nil {
				return Page[T]{}, false
			}
			count, haveCount = f, true
		case "results":
			if results != nil || !s.consume('[') {
				return Page[T]{}, false
			}
			var ok bool
			if results, ok = plainResults[T](&s, isRaw); !ok {
				return Page[T]{}, false
			}
		case "next", "previous":
			if !s.skip(0) {
				return Page[T]{}, false
			}
		default:
			return Page[T]{}, false
		}
	}
	s.ws()
	if s.bad || s.i != len(s.b) || !haveCount || results == nil {
		return Page[T]{}, false
	}
	normalizeAll(results)
	return Page[T]{Count: int(Number(count)), Results: results}, true
}

// plainResults reads the elements of the results array, its '[' read.
func plainResults[T any](s *plainScanner, isRaw bool) ([]T, bool) {
	results := make([]T, 0, min(len(s.b)/64+1, MaxPageSize)) // a page is asked for MaxPageSize at most
	s.ws()
	if s.consume(']') {
		return results, true
	}
	for {
		s.ws()
		results = append(results, *new(T))
		last := &results[len(results)-1]
		if isRaw {
			tok, ok := s.value()
			if !ok {
				return nil, false
			}
			*any(last).(*json.RawMessage) = tok[:len(tok):len(tok)]
		} else if !any(last).(plainDecoder).decodePlain(s) {
			return nil, false
		}
		s.ws()
		if s.consume(']') {
			return results, true
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// The names of every field of the types read plainly: a member that matches one only in
// another case is left to encoding/json.
var (
	domainFields = []string{"id", "verbose_name", "status", "user_power_state", "cpu_count", "memory_count",
		"node", "parent", "template", "thin", "guest_utils", "cpu_used_percent_user", "mem_used_percent_user",
		"vdisks_count", "tags", "resource_pool", "os_type", "os_version", "cluster", "uptime_on_current_node",
		"uptime_total", "cpu_topology", "permissions"}
	vdiskFields = []string{"id", "verbose_name", "status", "size", "virtual_size", "datapool", "vdisk", "hints",
		"snapshots", "disk_type", "target_bus", "driver_cache", "shareable", "ssd", "readonly", "created", "modified"}
	ifaceFields = []string{"id", "name", "vmachine_info", "vmachine_name", "mac_address", "nic_driver", "status",
		"vnetwork_info", "link_state", "node_info"}
	datapoolRefFields = []string{"id", "verbose_name", "type"}
	networkRefFields  = []string{"id", "verbose_name", "entity_type"}
)

// decodePlain reads a listed domain. The detail-only fields other than strings are left to
// encoding/json.
func (d *Domain) decodePlain(s *plainScanner) bool {
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&d.ID)
		case "verbose_name":
			ok = s.str(&d.VerboseName)
		case "status":
			ok = s.str(&d.Status)
		case "user_power_state":
			ok = s.unmarshal(&d.UserPowerState)
		case "cpu_count":
			ok = s.unmarshal(&d.CPUCount)
		case "memory_count":
			ok = s.unmarshal(&d.MemoryCount)
		case "vdisks_count":
			ok = s.unmarshal(&d.VdisksCount)
		case "node":
			ok = s.unmarshal(&d.Node)
		case "parent":
			ok = s.refPtr(&d.Parent)
		case "resource_pool":
			ok = s.refPtr(&d.ResourcePool)
		case "template":
			ok = s.boolean(&d.Template)
		case "thin":
			ok = s.boolean(&d.Thin)
		case "guest_utils":
			ok = s.unmarshal(&d.GuestUtils)
		case "cpu_used_percent_user":
			ok = s.numberPtr(&d.CPUUsedPercentUser)
		case "mem_used_percent_user":
			ok = s.numberPtr(&d.MemUsedPercentUser)
		case "tags":
			ok = s.tags(&d.Tags)
		case "os_type":
			ok = s.str(&d.OSType)
		case "os_version":
			ok = s.str(&d.OSVersion)
		default:
			ok = s.unknown(domainFields)
		}
		return ok
	})
}

// tags reads a []Tag field: null is nil, [] an empty slice, each element by Tag's UnmarshalJSON.
func (s *plainScanner) tags(p *[]Tag) bool {
	if s.null() {
		*p = nil
		return true
	}
	if !s.consume('[') {
		return false
	}
	out := []Tag{}
	s.ws()
	for !s.consume(']') {
		if len(out) > 0 && !s.consume(',') {
			return false
		}
		s.ws()
		var t Tag
		if !s.unmarshal(&t) {
			return false
		}
		out = append(out, t)
		s.ws()
	}
	*p = out
	return true
}

// decodePlain reads a listed disk.
func (v *Vdisk) decodePlain(s *plainScanner) bool {
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&v.ID)
		case "verbose_name":
			ok = s.str(&v.VerboseName)
		case "status":
			ok = s.str(&v.Status)
		case "size":
			ok = s.numberPtr(&v.Size)
		case "virtual_size":
			ok = s.numberPtr(&v.VirtualSize)
		case "datapool":
			ok = v.Datapool.decodePlain(s)
		case "vdisk":
			ok = s.refPtr(&v.Domain)
		case "hints":
			ok = s.unmarshal(&v.Hints)
		case "disk_type":
			ok = s.str(&v.DiskType)
		case "target_bus":
			ok = s.str(&v.TargetBus)
		case "driver_cache":
			ok = s.str(&v.DriverCache)
		case "shareable":
			ok = s.boolean(&v.Shareable)
		case "ssd":
			ok = s.boolean(&v.SSD)
		case "readonly":
			ok = s.boolean(&v.ReadOnly)
		case "created":
			ok = s.unmarshal(&v.Created)
		case "modified":
			ok = s.unmarshal(&v.Modified)
		default:
			ok = s.unknown(vdiskFields)
		}
		return ok
	})
}

// decodePlain reads a disk's datapool: an object, or null (which leaves it as it was).
func (r *DatapoolRef) decodePlain(s *plainScanner) bool {
	if s.null() {
		return true
	}
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&r.ID)
		case "verbose_name":
			ok = s.str(&r.VerboseName)
		case "type":
			ok = s.str(&r.Type)
		default:
			ok = s.unknown(datapoolRefFields)
		}
		return ok
	})
}

// decodePlain reads a listed network interface.
func (v *VMachineInf) decodePlain(s *plainScanner) bool {
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&v.ID)
		case "name":
			ok = s.str(&v.Name)
		case "vmachine_info":
			ok = s.refPtr(&v.Domain)
		case "vmachine_name":
			ok = s.str(&v.DomainName)
		case "mac_address":
			ok = s.str(&v.MACAddress)
		case "nic_driver":
			ok = s.str(&v.NICDriver)
		case "status":
			ok = s.str(&v.Status)
		case "vnetwork_info":
			ok = s.networkPtr(&v.Network)
		case "link_state":
			ok = s.str(&v.LinkState)
		case "node_info":
			ok = s.refPtr(&v.Node)
		default:
			ok = s.unknown(ifaceFields)
		}
		return ok
	})
}

// networkPtr reads an interface's network: null is nil; an object is read into the one there
// (encoding/json merges a repeated member's objects).
func (s *plainScanner) networkPtr(p **NetworkRef) bool {
	if s.null() {
		*p = nil
		return true
	}
	if *p == nil {
		*p = new(NetworkRef)
	}
	r := *p
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&r.ID)
		case "verbose_name":
			ok = s.str(&r.VerboseName)
		case "entity_type":
			ok = s.str(&r.EntityType)
		default:
			ok = s.unknown(networkRefFields)
		}
		return ok
	})
}

var (
	datapoolFields = []string{"id", "verbose_name", "status", "type", "size", "used_space", "free_space",
		"nodes_connected", "vdisk_count", "file_count", "iso_count"}
	nodeFields = []string{"id", "verbose_name", "status", "cpu_count", "memory_count", "management_ip",
		"domains_count", "domains_on_count", "cluster", "datacenter_name", "datacenter_id",
		"cpu_used_percent_user", "mem_used_percent_user", "version", "ballooning", "uptime", "cpu_topology",
		"created", "modified"}
)

// decodePlain reads a listed datapool (its nodes_connected, every node for a shared pool, is
// most of the bytes of its page).
func (d *Datapool) decodePlain(s *plainScanner) bool {
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&d.ID)
		case "verbose_name":
			ok = s.str(&d.VerboseName)
		case "status":
			ok = s.str(&d.Status)
		case "type":
			ok = s.str(&d.Type)
		case "size":
			ok = s.unmarshal(&d.Size)
		case "used_space":
			ok = s.unmarshal(&d.UsedSpace)
		case "free_space":
			ok = s.unmarshal(&d.FreeSpace)
		case "nodes_connected":
			ok = s.unmarshal(&d.NodesConnected)
		case "vdisk_count":
			ok = s.unmarshal(&d.VdiskCount)
		case "file_count":
			ok = s.unmarshal(&d.FileCount)
		case "iso_count":
			ok = s.unmarshal(&d.IsoCount)
		default:
			ok = s.unknown(datapoolFields)
		}
		return ok
	})
}

// decodePlain reads a listed node. The detail-only fields other than strings are left to
// encoding/json.
func (d *Node) decodePlain(s *plainScanner) bool {
	return s.object(func() (ok bool) {
		switch string(s.key) {
		case "id":
			ok = s.str(&d.ID)
		case "verbose_name":
			ok = s.str(&d.VerboseName)
		case "status":
			ok = s.str(&d.Status)
		case "cpu_count":
			ok = s.unmarshal(&d.CPUCount)
		case "memory_count":
			ok = s.unmarshal(&d.MemoryCount)
		case "management_ip":
			ok = s.str(&d.ManagementIP)
		case "domains_count":
			ok = s.unmarshal(&d.DomainsCount)
		case "domains_on_count":
			ok = s.unmarshal(&d.DomainsOnCount)
		case "cluster":
			ok = s.unmarshal(&d.Cluster)
		case "datacenter_name":
			ok = s.str(&d.DatacenterName)
		case "datacenter_id":
			ok = s.str(&d.DatacenterID)
		case "cpu_used_percent_user":
			ok = s.numberPtr(&d.CPUUsedPercentUser)
		case "mem_used_percent_user":
			ok = s.numberPtr(&d.MemUsedPercentUser)
		case "version":
			ok = s.str(&d.Version)
		case "created":
			ok = s.str(&d.Created)
		case "modified":
			ok = s.str(&d.Modified)
		default:
			ok = s.unknown(nodeFields)
		}
		return ok
	})
}
