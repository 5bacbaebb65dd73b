package natsconn

// The embedded NATS server: started in the exporter's process when nats.embedded is configured,
// with JetStream storing under its store directory and syncing it to disk as nats.embedded.sync
// says (JetStream acknowledges before it syncs: the setting bounds what a power loss drops).

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/veil-exporter/veil-exporter/config"
)

// EmbeddedExposure says why the embedded server cfg describes can be reached by others without
// credentials, or "": it has no authentication, so any address but a loopback one lets every
// host that reaches it read the events and the inventory, publish into the stream and move the
// positions and leases.
func EmbeddedExposure(cfg config.Embedded) string {
	if !cfg.Enabled {
		return ""
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return "" // refused at start with its own error
	}
	if host == "localhost" {
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
		return ""
	}
	where := "on " + cfg.Listen
	if host == "" || host == "0.0.0.0" || host == "::" {
		where = "on every interface (" + cfg.Listen + ")"
	}
	return fmt.Sprintf("the embedded NATS server listens %s without authentication: any host that reaches it can read the events "+
		"and the inventory, publish into the stream and change the event positions and leases; "+
		"set nats.embedded.listen to a loopback address (127.0.0.1:4222), or use an external NATS server with credentials", where)
}

// startEmbedded starts the server cfg describes and waits until it takes connections.
func startEmbedded(cfg config.Embedded) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("bad nats.embedded.listen %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("bad nats.embedded.listen port %q: %w", portStr, err)
	}
	opts := &server.Options{
		ServerName: "veil-exporter", Host: host, Port: port,
		JetStream: true, StoreDir: cfg.StoreDir, NoSigs: true, NoLog: true,
	}
	// A zero setting (a config built in code) leaves NATS's own default, two minutes.
	opts.SyncAlways, opts.SyncInterval = cfg.Sync.Always, cfg.Sync.Interval
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("couldn't create embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server did not start on %s", cfg.Listen)
	}
	return srv, nil
}
