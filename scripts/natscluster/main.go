// Command natscluster runs a three-node NATS JetStream cluster on loopback in one process, for
// make demo-ha (no nats-server binary needed). It prints the client URLs and runs until killed;
// each node's store lives under -dir.
//
//	go run ./scripts/natscluster -dir /tmp/nats -ports 4222,4223,4224
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	dir := flag.String("dir", "", "directory of the nodes' JetStream stores (required)")
	ports := flag.String("ports", "4222,4223,4224", "client ports of the three nodes")
	flag.Parse()
	if err := run(*dir, strings.Split(*ports, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "natscluster:", err)
		os.Exit(1)
	}
}

func run(dir string, ports []string) error {
	if dir == "" || len(ports) != 3 {
		return fmt.Errorf("need -dir and three -ports")
	}
	routes := make([]int, 3)
	for i := range routes {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		routes[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	var servers []*server.Server
	var urls []string
	for i, p := range ports {
		port, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("port %q: %w", p, err)
		}
		var rs []string
		for j, rp := range routes {
			if j != i {
				rs = append(rs, "nats-route://127.0.0.1:"+strconv.Itoa(rp))
			}
		}
		opts := &server.Options{
			ServerName: "n" + strconv.Itoa(i+1), Host: "127.0.0.1", Port: port,
			JetStream: true, StoreDir: filepath.Join(dir, "n"+strconv.Itoa(i+1)), NoSigs: true,
			Cluster: server.ClusterOpts{Name: "veil-demo", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(rs, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			return err
		}
		go s.Start()
		servers = append(servers, s)
		urls = append(urls, "nats://127.0.0.1:"+p)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			return fmt.Errorf("%s did not start", s.Name())
		}
	}
	fmt.Println(strings.Join(urls, ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	for _, s := range servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
	return nil
}
