package collector

// The guest checker's series: their Descs, made once per checker, and Collect, which exports
// what the checks stored for the VMs eligible in the current inventory snapshot.

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/metricutil"
)

type guestDescs struct {
	pingSuccess, pingDuration, osInfo, fsSize, fsUsed, clockOffset, cmdErrors,
	sweepDuration, eligible, checked, unsupported *prometheus.Desc
	net [nicCounters]*prometheus.Desc // indexed by nicRxBytes...
}

func newGuestDescs(controller string, cfg config.Guest) guestDescs {
	// controller is a constant label so that one registry can hold a checker per controller.
	cl := prometheus.Labels{"controller": controller}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	ds := guestDescs{
		pingSuccess: d("veil_guest_ping_success",
			fmt.Sprintf("1 if the last guest-ping of the VM's guest agent succeeded (every %s, longer when the request budget is short).", cfg.PingInterval),
			"domain_id"),
		pingDuration: d("veil_guest_ping_duration_seconds",
			fmt.Sprintf("Round trip on the wire of the last guest-ping through the controller (every %s, longer when the request budget is short).", cfg.PingInterval),
			"domain_id"),
		osInfo: d("veil_guest_os_info",
			fmt.Sprintf("Guest operating system from guest-get-osinfo, asked when the agent connects and every %s; value 1.", cfg.OSInfoInterval),
			"domain_id", "os_id", "os_name", "os_version", "kernel_release", "machine", "pretty_name"),
		fsSize: d("veil_guest_filesystem_size_bytes",
			fmt.Sprintf("Filesystem size from guest-get-fsinfo, cached for %s.", cfg.FSInfoInterval),
			"domain_id", "mountpoint", "fstype", "device"),
		fsUsed: d("veil_guest_filesystem_used_bytes",
			fmt.Sprintf("Filesystem used bytes from guest-get-fsinfo, cached for %s.", cfg.FSInfoInterval),
			"domain_id", "mountpoint", "fstype", "device"),
		clockOffset: d("veil_guest_clock_offset_seconds",
			fmt.Sprintf("Guest clock minus exporter clock from guest-get-time, against the middle of the request's round trip; cached for %s.", cfg.TimeInterval),
			"domain_id"),
		cmdErrors: d("veil_guest_command_errors_total",
			"Failed guest-agent calls by command (available-guest-cmds for the command list) and reason (timeout, agent_not_running, not_supported, api_error).",
			"command", "reason"),
		sweepDuration: d("veil_guest_sweep_duration_seconds", "Real time of the last full guest-ping sweep over all eligible VMs; above ping_interval when the budget is too small."),
		eligible:      d("veil_guest_eligible_domains", "Running VMs with a connected guest agent (guest checks apply)."),
		checked:       d("veil_guest_checked_domains", "Eligible VMs that have had a guest-ping since they became eligible."),
		unsupported: d("veil_guest_unsupported_domains",
			fmt.Sprintf("Running VMs with a connected agent on which the platform refuses guest commands (for example Windows guests where it allows Linux only); they have no veil_guest_* series, are not in veil_guest_eligible_domains and are asked again every %s or when their agent reconnects.", cfg.OSInfoInterval)),
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
		ds.net[i] = d("veil_guest_network_"+c.name+"_total",
			fmt.Sprintf("%s by the guest's interface, as the guest counts them (guest-network-get-interfaces; they restart when the guest reboots); read every %s.", c.what, cfg.NetworkInterval),
			"domain_id", "interface")
	}
	return ds
}

// Describe implements prometheus.Collector.
func (g *GuestChecker) Describe(ch chan<- *prometheus.Desc) {
	d := g.descs
	for _, desc := range []*prometheus.Desc{d.pingSuccess, d.pingDuration, d.osInfo, d.fsSize, d.fsUsed,
		d.clockOffset, d.cmdErrors, d.sweepDuration, d.eligible, d.checked, d.unsupported} {
		ch <- desc
	}
	for _, desc := range d.net {
		ch <- desc
	}
}

// Collect implements prometheus.Collector. Only VMs eligible in the current inventory snapshot
// are exported, so stopped, agentless and deleted VMs lose their series at once. The run
// status (veil_collector_*) is not sent here: the daemon emits it from RunStatus.
func (g *GuestChecker) Collect(ch chan<- prometheus.Metric) {
	inv := g.snapshot()
	g.mu.Lock()
	defer g.mu.Unlock()
	eligible, unsupported := g.coverage(inv)
	d := g.descs
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	checked := 0
	for _, id := range eligible {
		v, ok := g.vms[id]
		if !ok || !v.pinged {
			continue
		}
		checked++
		gauge(d.pingSuccess, metricutil.Bool(v.pingOK), id)
		gauge(d.pingDuration, v.pingDur, id)
		if o := v.os; o != nil {
			gauge(d.osInfo, 1, id, o.ID, o.Name, o.Version, o.KernelRelease, o.Machine, o.PrettyName)
		}
		for _, f := range v.fs {
			gauge(d.fsSize, f.size, id, f.mountpoint, f.fstype, f.device)
			gauge(d.fsUsed, f.used, id, f.mountpoint, f.fstype, f.device)
		}
		if v.hasClock {
			gauge(d.clockOffset, v.clock, id)
		}
		for i := range v.nics {
			for c := range nicCounters {
				ch <- &nicMetric{desc: d.net[c], nic: &v.nics[i], i: c}
			}
		}
	}
	for k, n := range g.errs {
		ch <- prometheus.MustNewConstMetric(d.cmdErrors, prometheus.CounterValue, n, k.command, k.reason)
	}
	gauge(d.eligible, float64(len(eligible)))
	gauge(d.checked, float64(checked))
	gauge(d.unsupported, float64(unsupported))
	if g.sweep.done {
		gauge(d.sweepDuration, g.sweep.dur.Seconds())
	}
}
