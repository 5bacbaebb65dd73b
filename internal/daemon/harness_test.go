// The daemon under test: New, Run and the coordinator wired as cmd/veil-exporter wires them,
// its handler served by exporter-toolkit on a loopback port, logging at debug to a buffer.

package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/exporter-toolkit/web"
	sloggokit "github.com/tjhop/slog-gokit"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/testutil"
)

type daemonUnderTest struct {
	base string
	logs *testutil.SyncBuffer
	d    *Daemon
	stop func()
}

// startDaemon runs the configuration in configFile until the test ends or stop is called; setup
// sees the daemon before anything of it runs.
func startDaemon(t *testing.T, configFile string, setup ...func(*Daemon)) *daemonUnderTest {
	t.Helper()
	return startDaemonServer(t, configFile, HandlerOptions{TelemetryPath: "/metrics", MaxRequests: 40, WriteTimeout: DefaultWriteTimeout, EnableLifecycle: true}, nil, setup...)
}

// startDaemonServer is startDaemon with the handler's options; onConn (may be nil) sees each
// connection the server accepts.
func startDaemonServer(t *testing.T, configFile string, ho HandlerOptions, onConn func(net.Conn), setup ...func(*Daemon)) *daemonUnderTest {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	logger := level.NewFilter(log.NewLogfmtLogger(log.NewSyncWriter(logs)), level.AllowDebug())
	cfg, err := config.Load(configFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigFile: configFile, Logger: logger, Version: "test"})
	if err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs)
	}
	for _, s := range setup {
		s(d)
	}
	addrc := make(chan string, 1)
	srv := &http.Server{Handler: d.Handler(ho), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(l net.Listener) context.Context { addrc <- l.Addr().String(); return context.Background() }}
	if onConn != nil {
		srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context { onConn(c); return ctx }
	}
	webLogger := slog.New(sloggokit.NewGoKitHandler(logger, slog.LevelDebug)).With("component", "web")
	addrs, systemd, webConfig := []string{"127.0.0.1:0"}, false, ""
	errc := make(chan error, 1)
	go func() {
		errc <- web.ListenAndServe(srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &systemd, WebConfigFile: &webConfig}, webLogger)
	}()
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = d.Run(context.Background()) }()
	dut := &daemonUnderTest{logs: logs, d: d}
	select {
	case a := <-addrc:
		dut.base = "http://" + a
	case err := <-errc:
		t.Fatalf("HTTP server: %v", err)
	}
	dut.stop = func() {
		// As cmd/veil-exporter: the server, then the daemon (its coordinator first).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("HTTP server: %v", err)
		}
		d.Stop()
		<-runDone
	}
	t.Cleanup(func() { dut.stop() })
	return dut
}

func (d *daemonUnderTest) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return d.do(t, http.MethodGet, path)
}

func (d *daemonUnderTest) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	return testutil.Do(t, method, d.base+path)
}

func (d *daemonUnderTest) waitReady(t *testing.T) {
	t.Helper()
	testutil.WaitReady(t, d.base, d.logs)
}
