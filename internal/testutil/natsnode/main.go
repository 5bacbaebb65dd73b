// Command natsnode runs one JetStream server of a test cluster in a process of its own; package
// testutil starts three (StartCluster). Out of the test binary, the server is not instrumented
// by the race detector, which reports races inside nats-server's clustered code that are not
// ours to fix; it prints "ready" once it accepts connections and stops on SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	name := flag.String("name", "", "server name")
	port := flag.Int("port", 0, "client port")
	clusterPort := flag.Int("cluster-port", 0, "route port")
	routes := flag.String("routes", "", "comma-separated nats-route:// URLs of the other nodes")
	store := flag.String("store", "", "JetStream store directory")
	noAdvertise := flag.Bool("no-advertise", false, "tell clients no URL of the other nodes (cluster no_advertise)")
	advertise := flag.String("cluster-advertise", "", "host:port this node gossips as its route address (cluster advertise)")
	httpPort := flag.Int("http", 0, "monitoring port (0: none)")
	flag.Parse()
	opts := &server.Options{
		ServerName: *name, Host: "127.0.0.1", Port: *port,
		JetStream: true, StoreDir: *store, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "veil-test", Host: "127.0.0.1", Port: *clusterPort,
			NoAdvertise: *noAdvertise, Advertise: *advertise},
		Routes: server.RoutesFromStr(*routes),
	}
	if *httpPort != 0 {
		opts.HTTPHost, opts.HTTPPort = "127.0.0.1", *httpPort
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(1)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "natsnode: not ready within 30 s")
		os.Exit(1)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
}
