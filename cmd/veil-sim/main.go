// Command veil-sim serves simulated ECP VeiL controllers (package veiltest) for demos, tests,
// benchmarks and anyone writing automation against the platform API: one by default, or several
// (--controllers) on consecutive ports, each with its own inventory and journal.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/veil-exporter/veil-exporter/veil/veiltest"
)

func main() {
	var o veiltest.Options
	listen := flag.String("listen", "127.0.0.1:8765", "address to listen on (of the first controller)")
	controllers := flag.Int("controllers", 1, "simulated controllers, each with its own inventory (seed, seed+1, ...) and journal, on consecutive ports from --listen's (port 0: each on a free port)")
	flag.StringVar(&o.Token, "token", "sim-token", "API token; clients send \"Authorization: jwt <token>\"")
	flag.StringVar(&o.ReadOnlyToken, "readonly-token", "", "token allowed to read only (POST/PUT answer 403)")
	flag.Int64Var(&o.Seed, "seed", 1, "seed of the generated inventory")
	flag.IntVar(&o.Nodes, "nodes", 3, "nodes")
	flag.IntVar(&o.Clusters, "clusters", 1, "clusters")
	flag.IntVar(&o.Datapools, "datapools", 2, "datapools")
	flag.IntVar(&o.VMs, "vms", 10, "virtual machines (-1 for none)")
	flag.IntVar(&o.Templates, "templates", 0, "how many VMs are templates (0: vms/20, -1: none)")
	flag.Float64Var(&o.RunningFraction, "running-fraction", 0.8, "share of VMs powered on (0: the default 0.8; negative: none)")
	flag.Float64Var(&o.AgentFraction, "agent-fraction", 0.9, "share of VMs with a guest agent (0: the default 0.9; negative: none)")
	flag.Float64Var(&o.LinuxFraction, "linux-fraction", 0.8, "share of VMs with a Linux guest (0: the default 0.8; negative: none)")
	flag.IntVar(&o.InitialEvents, "initial-events", 100, "events in the journal at start")
	flag.Float64Var(&o.EventRate, "event-rate", 0.5, "background activity in journal events per second: simulated operations (VMs stopped and started, backups, clones, migrations) as tasks with their events, and guest agents lost and back")
	flag.StringVar(&o.EventsOrder, "events-order", "newest_first", "default ordering of /api/events/: newest_first or oldest_first")
	flag.IntVar(&o.EventsRetention, "events-retention", 0, "keep at most this many events (0: unlimited)")
	flag.DurationVar(&o.Latency, "latency", 0, "latency added to every /api/ request")
	flag.DurationVar(&o.LatencyJitter, "latency-jitter", 0, "random extra latency up to this value")
	flag.Float64Var(&o.FaultRate, "fault-rate", 0, "fraction of /api/ requests answered with a random 500/503/418")
	flag.StringVar(&o.Profile, "profile", "default", "shapes where the vendor's clients disagree: default, or alternative (\"entity\" uuid in envelopes, number percentages, a resource_pool object, tags as strings, domain detail objects)")
	flag.BoolVar(&o.PercentNumbers, "percent-numbers", false, "send usage percentages of nodes, clusters and domains as JSON numbers instead of decimal strings (\"12.50\")")
	flag.StringVar(&o.ControllerVersion, "controller-version", veiltest.DefaultControllerVersion, "platform version GET /api/controllers/base-version/ answers; none: 404, as on a controller older than the endpoint")
	flag.DurationVar(&o.TaskDuration, "task-duration", 300*time.Millisecond, "how long a task runs")
	flag.BoolVar(&o.NoPush, "no-push", false, "serve no push channel: /ws/ answers 404, as a controller without one")
	flag.BoolVar(&o.NoDevices, "no-devices", false, "serve neither /api/vdisks/ nor /api/vmachine-infs/ (404), as a controller older than those collections")
	flag.IntVar(&o.ChangeLog, "change-log", 0, "keep the last N changes made to nodes, datapools, VMs and tasks, with their objects, for GET /_sim/changes?since=<seq> (0: none)")
	flag.Parse()

	if o.Profile != veiltest.ProfileDefault && o.Profile != veiltest.ProfileAlternative {
		fmt.Fprintln(os.Stderr, "veil-sim: --profile must be default or alternative")
		os.Exit(2)
	}
	if o.EventsOrder != "newest_first" && o.EventsOrder != "oldest_first" {
		fmt.Fprintln(os.Stderr, "veil-sim: --events-order must be newest_first or oldest_first")
		os.Exit(2)
	}
	addrs, err := listenAddrs(*listen, *controllers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "veil-sim:", err)
		os.Exit(2)
	}
	seed := o.Seed
	for i, addr := range addrs {
		o.Seed = seed + int64(i)
		sim := veiltest.NewUnstarted(o)
		defer sim.Close()
		if err := sim.StartOn(addr); err != nil {
			fmt.Fprintln(os.Stderr, "veil-sim:", err)
			os.Exit(1)
		}
		st := sim.Summary()
		fmt.Printf("veil-sim listening on %s\ntoken: %s\ninventory: %d nodes, %d clusters, %d datapools, %d domains, %d events\ncontrol API: %s/_sim/state\n",
			sim.URL, sim.Token, st.Nodes, st.Clusters, st.Datapools, st.Domains, st.Events, sim.URL)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	fmt.Printf("veil-sim: %s, stopping\n", s)
}

// listenAddrs is where n controllers listen: listen and the n-1 ports after it, or n free ports
// when its port is 0.
func listenAddrs(listen string, n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("--controllers must be at least 1, not %d", n)
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port+n-1 > 65535 {
		return nil, fmt.Errorf("--listen %q: no room for %d ports from %s", listen, n, portStr)
	}
	out := make([]string, n)
	for i := range out {
		p := port
		if p != 0 {
			p += i
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return out, nil
}
