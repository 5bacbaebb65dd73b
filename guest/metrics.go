package guest

// The guest checker's series: their Descs, made once per checker, and emit, which exports a
// view of what the checks stored for the VMs eligible in the current inventory snapshot,
// rendered (Rendered) at most every guestRenderEvery after a change, or live (Collect).

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/internal/exposition"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
)

type guestDescs struct {
	pingSuccess, pingDuration, osInfo, fsSize, fsUsed, clockOffset,
	sweepDuration, eligible, checked, unsupported *exposition.Desc
	net        [nicCounters]*exposition.Desc  // indexed by nicRxBytes...
	disk       [diskCounters]*exposition.Desc // indexed by diskReadBytes...
	cpuSeconds *exposition.Desc
	load       [3]*exposition.Desc // load1, load5, load15

	cmdErrors *prometheus.Desc // live
}

func newGuestDescs(controller string) guestDescs {
	// controller is a constant label so that one registry can hold a checker per controller.
	cl := prometheus.Labels{"controller": controller}
	d := func(name, help string, labels ...string) *exposition.Desc {
		return exposition.NewDesc(name, help, prometheus.GaugeValue, labels, cl)
	}
	ds := guestDescs{
		pingSuccess: d("veil_guest_ping_success",
			"1 if the last guest-ping of the VM's guest agent succeeded (every guest.ping_interval, longer when the request budget is short).",
			"domain_id"),
		pingDuration: d("veil_guest_ping_duration_seconds",
			"Round trip on the wire of the last guest-ping through the controller (every guest.ping_interval, longer when the request budget is short).",
			"domain_id"),
		osInfo: d("veil_guest_os_info",
			"Guest operating system from guest-get-osinfo, asked when the agent connects and every guest.osinfo_interval; value 1.",
			"domain_id", "os_id", "os_name", "os_version", "kernel_release", "machine", "pretty_name"),
		fsSize: d("veil_guest_filesystem_size_bytes",
			"Filesystem size from guest-get-fsinfo, cached for guest.fsinfo_interval.",
			"domain_id", "mountpoint", "fstype", "device"),
		fsUsed: d("veil_guest_filesystem_used_bytes",
			"Filesystem used bytes from guest-get-fsinfo, cached for guest.fsinfo_interval.",
			"domain_id", "mountpoint", "fstype", "device"),
		clockOffset: d("veil_guest_clock_offset_seconds",
			"Guest clock minus exporter clock from guest-get-time, against the middle of the request's round trip; cached for guest.time_interval.",
			"domain_id"),
		cmdErrors: prometheus.NewDesc("veil_guest_command_errors_total",
			"Failed guest-agent calls by command (available-guest-cmds for the command list) and reason (timeout, agent_not_running, not_supported, bad_answer, api_error).",
			[]string{"command", "reason"}, cl),
		sweepDuration: d("veil_guest_sweep_duration_seconds", "Real time of the last full guest-ping sweep over all eligible VMs; above ping_interval when the budget is too small."),
		eligible:      d("veil_guest_eligible_domains", "Running VMs with a connected guest agent (guest checks apply)."),
		checked:       d("veil_guest_checked_domains", "Eligible VMs that have had a guest-ping since they became eligible."),
		unsupported: d("veil_guest_unsupported_domains",
			"Running VMs with a connected agent on which the platform refuses guest commands (for example Windows guests where it allows Linux only); they have no veil_guest_* series, are not in veil_guest_eligible_domains and are asked again every guest.osinfo_interval or when their agent reconnects."),
	}
	for i, c := range [nicCounters]struct{ name, what string }{
		nicRxBytes:   {"receive_bytes", "Bytes received"},
		nicRxPackets: {"receive_packets", "Packets received"},
		nicRxErrors:  {"receive_errors", "Receive errors"},
		nicRxDrop:    {"receive_drop", "Received packets dropped"},
		nicTxBytes:   {"transmit_bytes", "Bytes transmitted"},
		nicTxPackets: {"transmit_packets", "Packets transmitted"},
		nicTxErrors:  {"transmit_errors", "Transmit errors"},
		nicTxDrop:    {"transmit_drop", "Transmitted packets dropped"},
	} {
		ds.net[i] = exposition.NewDesc("veil_guest_network_"+c.name+"_total",
			c.what+" by the guest's interface, as the guest counts them (guest-network-get-interfaces; they restart when the guest reboots); read every guest.network_interval.",
			prometheus.CounterValue, []string{"domain_id", "interface"}, cl)
	}
	for i, c := range [diskCounters]struct{ name, what string }{
		diskReadBytes:       {"read_bytes", "Bytes read (sectors of 512 bytes)"},
		diskWrittenBytes:    {"written_bytes", "Bytes written (sectors of 512 bytes)"},
		diskReadsCompleted:  {"reads_completed", "Reads completed"},
		diskWritesCompleted: {"writes_completed", "Writes completed"},
		diskReadTime:        {"read_time_seconds", "Time spent reading"},
		diskWriteTime:       {"write_time_seconds", "Time spent writing"},
		diskIOTime:          {"io_time_seconds", "Time the disk was busy with I/O"},
	} {
		ds.disk[i] = exposition.NewDesc("veil_guest_disk_"+c.name+"_total",
			c.what+" by the guest's disk, as the guest counts them (guest-get-diskstats, where the guest's agent offers it; they restart when the guest reboots); read every guest.stats_interval.",
			prometheus.CounterValue, []string{"domain_id", "device"}, cl)
	}
	ds.cpuSeconds = exposition.NewDesc("veil_guest_cpu_seconds_total",
		"CPU time of the guest by mode, summed over its CPUs, as the guest counts it (guest-get-cpustats in USER_HZ ticks of 1/100 s, where the guest's agent offers it; it restarts when the guest reboots); read every guest.stats_interval.",
		prometheus.CounterValue, []string{"domain_id", "mode"}, cl)
	for i, m := range []string{"1", "5", "15"} {
		ds.load[i] = exposition.NewDesc("veil_guest_load"+m,
			"The guest's "+m+"-minute load average (guest-get-load, where the guest's agent offers it); read every guest.stats_interval.",
			prometheus.GaugeValue, []string{"domain_id"}, cl)
	}
	return ds
}

// CollectRendered sends what Rendered holds, encoded live from the checker's state now.
func (g *Checker) CollectRendered(ch chan<- prometheus.Metric) {
	g.descs.emit(exposition.Live(ch), g.view(g.domains.latest()))
}

// CollectLive sends the families that Rendered leaves out: the command error counters.
func (g *Checker) CollectLive(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs.collect(ch, g.descs.cmdErrors)
}

// guestView is what the series show of the checker's state at one instant: copied under g.mu
// (a check replaces a VM's measurements, it never changes them in place) and emitted without
// it, so that neither the checks nor a scrape wait for a render.
type guestView struct {
	vms                   []guestVMView // the checked eligible VMs, by id
	eligible, unsupported int
	sweepDone             bool
	sweepDur              time.Duration
}

type guestVMView struct {
	id string
	guestMeasures
}

// view copies the state of the VMs eligible in inv. Only those are exported, so stopped,
// agentless and deleted VMs lose their series at once.
func (g *Checker) view(inv guestInventory) guestView {
	g.mu.Lock()
	eligible, unsupported := g.coverage(inv)
	w := guestView{vms: make([]guestVMView, 0, len(eligible)), eligible: len(eligible), unsupported: unsupported,
		sweepDone: g.sweep.done, sweepDur: g.sweep.dur}
	for _, id := range eligible {
		if v, ok := g.vms[id]; ok && v.pinged {
			w.vms = append(w.vms, guestVMView{id: id, guestMeasures: v.guestMeasures})
		}
	}
	g.mu.Unlock()
	// The order of most families: a render need not sort them again.
	slices.SortFunc(w.vms, func(a, b guestVMView) int { return strings.Compare(a.id, b.id) })
	return w
}

// emit sends the view's series one family after the other: a render compresses each family
// and drops its text before the next (Flush).
func (d *guestDescs) emit(e exposition.Sink, w guestView) {
	each := func(f func(v *guestVMView)) {
		for i := range w.vms {
			f(&w.vms[i])
		}
		e.Flush()
	}
	each(func(v *guestVMView) { e.Add(d.pingSuccess, metricutil.Bool(v.pingOK), v.id) })
	each(func(v *guestVMView) { e.Add(d.pingDuration, v.pingDur, v.id) })
	each(func(v *guestVMView) {
		if o := v.os; o != nil {
			e.Add(d.osInfo, 1, v.id, o.ID, o.Name, o.Version, o.KernelRelease, o.Machine, o.PrettyName)
		}
	})
	each(func(v *guestVMView) {
		for _, f := range v.fs {
			e.Add(d.fsSize, f.size, v.id, f.mountpoint, f.fstype, f.device)
		}
	})
	each(func(v *guestVMView) {
		for _, f := range v.fs {
			e.Add(d.fsUsed, f.used, v.id, f.mountpoint, f.fstype, f.device)
		}
	})
	each(func(v *guestVMView) {
		if v.hasClock {
			e.Add(d.clockOffset, v.clock, v.id)
		}
	})
	for c := range nicCounters {
		each(func(v *guestVMView) {
			for i := range v.nics {
				e.Add(d.net[c], v.nics[i].counters[c], v.id, v.nics[i].name)
			}
		})
	}
	for c := range diskCounters {
		each(func(v *guestVMView) {
			for i := range v.disks {
				if k := &v.disks[i]; k.has&(1<<c) != 0 {
					e.Add(d.disk[c], k.counters[c], v.id, k.name)
				}
			}
		})
	}
	each(func(v *guestVMView) {
		if c := v.cpu; c != nil {
			for i, mode := range cpuModes {
				if c.has&(1<<i) != 0 {
					e.Add(d.cpuSeconds, c.seconds[i], v.id, mode)
				}
			}
		}
	})
	for i := range d.load {
		each(func(v *guestVMView) {
			if l := v.load; l != nil && l.has&(1<<i) != 0 {
				e.Add(d.load[i], l.avg[i], v.id)
			}
		})
	}
	e.Add(d.eligible, float64(w.eligible))
	e.Add(d.checked, float64(len(w.vms)))
	e.Add(d.unsupported, float64(w.unsupported))
	if w.sweepDone {
		e.Add(d.sweepDuration, w.sweepDur.Seconds())
	}
}
