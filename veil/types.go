package veil

import (
	"encoding/json"
	"fmt"
	"time"
	"unsafe"
)

// Power states of a domain (user_power_state).
const (
	PowerUndefined = 0
	PowerOff       = 1
	PowerSuspended = 2
	PowerOn        = 3
)

// Final task statuses; every other status (IN_PROGRESS) means the task still runs.
const (
	TaskInProgress = "IN_PROGRESS"
	TaskSuccess    = "SUCCESS"
	TaskFailed     = "FAILED"
	TaskCanceled   = "CANCELED"
	TaskLost       = "LOST"
	TaskPartial    = "PARTIAL"
)

// Number decodes a JSON number, a numeric string ("2.49"), null or "" (as 0).
// The real platform sends some numbers as strings.
type Number float64

// Ref is a reference to another object: the platform sends either {"id":..,"verbose_name":..}
// or a bare uuid string.
type Ref struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
}

// Node is a hypervisor host (GET /api/nodes/).
type Node struct {
	ID                 string  `json:"id"`
	VerboseName        string  `json:"verbose_name"`
	Status             string  `json:"status"`
	CPUCount           Number  `json:"cpu_count"`
	MemoryCount        Number  `json:"memory_count"` // MiB
	ManagementIP       string  `json:"management_ip"`
	DomainsCount       Number  `json:"domains_count"`
	DomainsOnCount     Number  `json:"domains_on_count"`
	Cluster            Ref     `json:"cluster"`
	DatacenterName     string  `json:"datacenter_name"`
	DatacenterID       string  `json:"datacenter_id"`
	CPUUsedPercentUser *Number `json:"cpu_used_percent_user"`
	MemUsedPercentUser *Number `json:"mem_used_percent_user"`
	// Detail only.
	Version     string       `json:"version"`
	Ballooning  *bool        `json:"ballooning"`
	Uptime      Uptime       `json:"uptime"`
	CPUTopology *CPUTopology `json:"cpu_topology"`
	Created     string       `json:"created"`
	Modified    string       `json:"modified"`
}

// Uptime is how long something has run: the platform sends seconds (a number or a numeric
// string) or an object {uptime, start_time, system_time, timezone}; null is zero.
type Uptime struct {
	Seconds    Number
	StartTime  Time
	SystemTime Time
	Timezone   string
}

// CPUTopology is the processor layout of a node or a domain (detail only).
type CPUTopology struct {
	CPUCount   Number `json:"cpu_count"`
	CPUSockets Number `json:"cpu_sockets"`
	CPUCores   Number `json:"cpu_cores"`
	CPUThreads Number `json:"cpu_threads"`
	CPUModel   string `json:"cpu_model"`
}

// Permissions are the actions the token may take on an object: the platform sends an array of
// names or an object whose keys are names (a key whose value is false or null is left out).
// Sorted when read from an object.
type Permissions []string

// Cluster is a group of nodes (GET /api/clusters/).
type Cluster struct {
	ID                 string  `json:"id"`
	VerboseName        string  `json:"verbose_name"`
	Status             string  `json:"status"`
	CPUCount           Number  `json:"cpu_count"`
	MemoryCount        Number  `json:"memory_count"` // MiB
	NodesCount         Number  `json:"nodes_count"`
	CPUUsedPercentUser *Number `json:"cpu_used_percent_user"`
	MemUsedPercentUser *Number `json:"mem_used_percent_user"`
}

// Datapool is a storage pool (GET /api/data-pools/). Sizes are in MiB.
type Datapool struct {
	ID             string          `json:"id"`
	VerboseName    string          `json:"verbose_name"`
	Status         string          `json:"status"`
	Type           string          `json:"type"`
	Size           Number          `json:"size"`
	UsedSpace      Number          `json:"used_space"`
	FreeSpace      Number          `json:"free_space"`
	NodesConnected json.RawMessage `json:"nodes_connected"`
	VdiskCount     Number          `json:"vdisk_count"`
	FileCount      Number          `json:"file_count"`
	IsoCount       Number          `json:"iso_count"`
}

// GuestUtils is what the platform knows of a domain's guest agent; empty ({}) without an agent.
type GuestUtils struct {
	VeilState  bool     `json:"veil_state"`
	Version    string   `json:"version"`
	Hostname   string   `json:"hostname"`
	IPv4       []string `json:"ipv4"`
	Interfaces []string `json:"interfaces"`
	QemuState  bool     `json:"qemu_state"` // the QEMU guest agent answers
}

// Domain is a virtual machine (GET /api/domains/).
type Domain struct {
	ID                 string     `json:"id"`
	VerboseName        string     `json:"verbose_name"`
	Status             string     `json:"status"`
	UserPowerState     Number     `json:"user_power_state"`
	CPUCount           Number     `json:"cpu_count"`
	MemoryCount        Number     `json:"memory_count"` // MiB
	Node               Ref        `json:"node"`
	Parent             *Ref       `json:"parent"`
	Template           bool       `json:"template"`
	Thin               bool       `json:"thin"`
	GuestUtils         GuestUtils `json:"guest_utils"`
	CPUUsedPercentUser *Number    `json:"cpu_used_percent_user"`
	MemUsedPercentUser *Number    `json:"mem_used_percent_user"`
	VdisksCount        Number     `json:"vdisks_count"`
	Tags               []Tag      `json:"tags"`
	ResourcePool       *Ref       `json:"resource_pool"` // nil: none (null or absent)
	// Detail only. CPUCount is taken from CPUTopology when the detail lacks it.
	OSType              string       `json:"os_type"`
	OSVersion           string       `json:"os_version"`
	Cluster             Ref          `json:"cluster"`
	UptimeOnCurrentNode Uptime       `json:"uptime_on_current_node"`
	UptimeTotal         Uptime       `json:"uptime_total"`
	CPUTopology         *CPUTopology `json:"cpu_topology"`
	Permissions         Permissions  `json:"permissions"`
}

// Tag is a label an operator put on an object; the platform sends a tag as a string or as
// {"colour","verbose_name"}.
type Tag struct {
	Name   string
	Colour string
}

// tagObject is a tag sent as an object.
type tagObject struct {
	VerboseName string `json:"verbose_name"`
	Colour      string `json:"colour"`
}

func (t *Tag) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plainASCII(b[1:len(b)-1]) {
		*t = Tag{Name: string(b[1 : len(b)-1])} // a plain string is its own value
		return nil
	}
	var f tagObject
	if tagObjectTable.whole(b, unsafe.Pointer(&f)) {
		*t = Tag{Name: f.VerboseName, Colour: f.Colour} // the plain object, read without encoding/json
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = Tag{Name: s}
		return nil
	}
	var o tagObject
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("cannot decode %s as a tag", short(b))
	}
	*t = Tag{Name: o.VerboseName, Colour: o.Colour}
	return nil
}

// Task is an operation of the platform (GET /api/tasks/).
type Task struct {
	ID           string          `json:"id"`
	VerboseName  string          `json:"verbose_name"`
	Name         string          `json:"name"`
	Status       string          `json:"status"`
	Progress     Number          `json:"progress"`
	Created      Time            `json:"created"`
	FinishedTime Time            `json:"finished_time"`
	Executed     Number          `json:"executed"` // seconds; 0 while running, a string when done
	ErrorMessage string          `json:"error_message"`
	Entities     json.RawMessage `json:"entities"`
}

// Final reports whether the task has reached a final status.
func (t *Task) Final() bool {
	switch t.Status {
	case TaskSuccess, TaskFailed, TaskCanceled, TaskLost, TaskPartial:
		return true
	}
	return false
}

// Event is one entry of the platform's journal (GET /api/events/). Raw holds the object exactly
// as the API returned it, so it can be forwarded byte for byte.
type Event struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Message  string          `json:"message"`
	User     string          `json:"user"`
	Created  Time            `json:"created"`
	Task     string          `json:"task"`
	Entities []EventEntity   `json:"entities"`
	Raw      json.RawMessage `json:"-"`
	// Invalid, set by the forwarder's decoder, says why the event could not be read as one
	// (no_id, bad_created, not_an_object): it is forwarded as the controller sent it, to a
	// subject of its own. "" for every readable event.
	Invalid string `json:"-"`
}

// EventEntity names an object an event is about.
type EventEntity struct {
	UUID  string `json:"entity_uuid"`
	Class string `json:"entity_class"`
}

// Time decodes the platform's ISO 8601 timestamps ("2021-08-20T10:08:09.761081Z"); null or "" is zero.
type Time struct{ time.Time }

// GuestOSInfo is the result of guest-get-osinfo; every field is optional.
type GuestOSInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	PrettyName    string `json:"pretty-name"`
	Version       string `json:"version"`
	VersionID     string `json:"version-id"`
	Variant       string `json:"variant"`
	VariantID     string `json:"variant-id"`
	KernelRelease string `json:"kernel-release"`
	KernelVersion string `json:"kernel-version"`
	Machine       string `json:"machine"`
}

// GuestFilesystem is one entry of guest-get-fsinfo. Sizes are nil when the guest does not report them.
type GuestFilesystem struct {
	Name       string          `json:"name"`
	Mountpoint string          `json:"mountpoint"`
	Type       string          `json:"type"`
	Disk       json.RawMessage `json:"disk"`
	UsedBytes  *Number         `json:"used-bytes"`
	TotalBytes *Number         `json:"total-bytes"`
}

// GuestNetworkInterface is one entry of guest-network-get-interfaces. Statistics is nil when
// the agent does not report counters; they are the guest's own and restart from zero when it
// reboots.
type GuestNetworkInterface struct {
	Name            string                  `json:"name"`
	HardwareAddress string                  `json:"hardware-address"`
	IPAddresses     []GuestIPAddress        `json:"ip-addresses"`
	Statistics      *GuestNetworkStatistics `json:"statistics"`
}

// GuestIPAddress is an address of a guest interface.
type GuestIPAddress struct {
	Type    string `json:"ip-address-type"` // ipv4 or ipv6
	Address string `json:"ip-address"`
	Prefix  Number `json:"prefix"`
}

// GuestNetworkStatistics are the counters of a guest interface since the guest booted.
type GuestNetworkStatistics struct {
	RxBytes   Number `json:"rx-bytes"`
	RxPackets Number `json:"rx-packets"`
	RxErrs    Number `json:"rx-errs"`
	RxDropped Number `json:"rx-dropped"`
	TxBytes   Number `json:"tx-bytes"`
	TxPackets Number `json:"tx-packets"`
	TxErrs    Number `json:"tx-errs"`
	TxDropped Number `json:"tx-dropped"`
}

// GuestInfo is the result of guest-info.
type GuestInfo struct {
	Version           string `json:"version"`
	SupportedCommands []struct {
		Name            string `json:"name"`
		Enabled         bool   `json:"enabled"`
		SuccessResponse bool   `json:"success-response"`
	} `json:"supported_commands"`
}

// Vdisk is a virtual disk (GET /api/vdisks/). The platform names the VM using the disk under
// the key "vdisk". Sizes are nil when the answer lacks them; their unit is not documented (the
// vendor's create call and the UI use GB).
type Vdisk struct {
	ID          string      `json:"id"`
	VerboseName string      `json:"verbose_name"`
	Status      string      `json:"status"`
	Size        *Number     `json:"size"`         // space the disk takes on its datapool (a decimal)
	VirtualSize *Number     `json:"virtual_size"` // the size the guest sees
	Datapool    DatapoolRef `json:"datapool"`
	Domain      *Ref        `json:"vdisk"` // the VM using it; nil for a free disk
	Hints       Number      `json:"hints"`
	// Detail only: nil or empty in a list item.
	Snapshots   []VdiskSnapshot `json:"snapshots"`
	DiskType    string          `json:"disk_type"`
	TargetBus   string          `json:"target_bus"` // virtio, ide, scsi, sata
	DriverCache string          `json:"driver_cache"`
	Shareable   bool            `json:"shareable"`
	SSD         bool            `json:"ssd"`
	ReadOnly    bool            `json:"readonly"`
	Created     Time            `json:"created"`
	Modified    Time            `json:"modified"`
}

// DatapoolRef is the datapool of a disk: {id, verbose_name, type}.
type DatapoolRef struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
	Type        string `json:"type"`
}

// VdiskSnapshot is a snapshot of a disk (detail only).
type VdiskSnapshot struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Vdisk  string `json:"vdisk"`
	Serial string `json:"serial"`
}

// VMachineInf is a network interface of a VM (GET /api/vmachine-infs/).
type VMachineInf struct {
	ID         string      `json:"id"`
	Name       string      `json:"name"`
	Domain     *Ref        `json:"vmachine_info"` // the VM; nil when the answer lacks it
	DomainName string      `json:"vmachine_name"`
	MACAddress string      `json:"mac_address"`
	NICDriver  string      `json:"nic_driver"`
	Status     string      `json:"status"` // the object's status (ACTIVE...), not its link
	Network    *NetworkRef `json:"vnetwork_info"`
	// Detail only, as far as the vendor's clients show: "" in a list item.
	LinkState string `json:"link_state"` // up or down
	Node      *Ref   `json:"node_info"`
}

// NetworkRef is the virtual network of an interface: {id, verbose_name, entity_type}.
type NetworkRef struct {
	ID          string `json:"id"`
	VerboseName string `json:"verbose_name"`
	EntityType  string `json:"entity_type"`
}
