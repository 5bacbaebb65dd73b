// Command veil-exporter exports the inventory of ECP VeiL controllers as Prometheus metrics,
// checks guest agents and forwards the platform's events to NATS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/exporter-toolkit/web"
	sloggokit "github.com/tjhop/slog-gokit"

	"github.com/veil-exporter/veil-exporter/config"
)

// Set with -ldflags "-X main.version=... -X main.revision=...".
var (
	version  = ""
	revision = ""
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "veil-exporter:", err)
		}
		os.Exit(1)
	}
}

type flags struct {
	configFile    string
	configCheck   bool
	listenAddress string
	webConfigFile string
	telemetryPath string
	logLevel      string
	logFormat     string
	version       bool
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("veil-exporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.configFile, "config.file", "config.yaml", "configuration file")
	fs.BoolVar(&f.configCheck, "config.check", false, "validate the config (and token files) and exit 0/1")
	fs.StringVar(&f.listenAddress, "web.listen-address", ":9867", "address of the HTTP server")
	fs.StringVar(&f.webConfigFile, "web.config.file", "", "exporter-toolkit web config (TLS, basic auth)")
	fs.StringVar(&f.telemetryPath, "web.telemetry-path", "/metrics", "path of the metrics")
	fs.StringVar(&f.logLevel, "log.level", "info", "debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log.format", "logfmt", "logfmt, json")
	fs.BoolVar(&f.version, "version", false, "print version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return f, nil
}

func buildVersion() (ver, rev string) {
	ver, rev = version, revision
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if ver == "" {
		ver = "dev"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}

// newLoggers returns the go-kit logger everything of ours logs to (no component yet: each
// part adds its own) and, on the same output and level, the slog logger the exporter-toolkit
// wants. The bridge is slog-gokit (as Prometheus used while it moved to slog): it keeps
// groups (group.key=value), and Enabled answers by the level.
func newLoggers(w io.Writer, lvl, format string) (log.Logger, *slog.Logger, error) {
	var l log.Logger
	switch format {
	case "logfmt":
		l = log.NewLogfmtLogger(log.NewSyncWriter(w))
	case "json":
		l = log.NewJSONLogger(log.NewSyncWriter(w))
	default:
		return nil, nil, fmt.Errorf("--log.format %q is not logfmt or json", format)
	}
	var opt level.Option
	var sl slog.Level
	switch lvl {
	case "debug":
		opt, sl = level.AllowDebug(), slog.LevelDebug
	case "info":
		opt, sl = level.AllowInfo(), slog.LevelInfo
	case "warn":
		opt, sl = level.AllowWarn(), slog.LevelWarn
	case "error":
		opt, sl = level.AllowError(), slog.LevelError
	default:
		return nil, nil, fmt.Errorf("--log.level %q is not debug, info, warn or error", lvl)
	}
	l = level.NewFilter(l, opt)
	kit := log.With(l, "ts", log.DefaultTimestampUTC, "caller", log.DefaultCaller)
	// The bridge adds the slog call site as caller itself, and the record's time as "time".
	bridge := sloggokit.NewGoKitHandler(tsKey{l}, sl)
	return kit, slog.New(bridge).With("component", "web"), nil
}

// tsKey renames the bridge's "time" to the "ts" (UTC) of every other line.
type tsKey struct{ next log.Logger }

func (t tsKey) Log(kv ...any) error {
	out := make([]any, 0, len(kv))
	for i := 0; i+1 < len(kv); i += 2 {
		if ts, ok := kv[i+1].(time.Time); ok && kv[i] == slog.TimeKey {
			out = append([]any{"ts", ts.UTC()}, out...)
			continue
		}
		out = append(out, kv[i], kv[i+1])
	}
	return t.next.Log(out...)
}

// run is the whole daemon; onListen (tests) learns the bound address.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, onListen func(addr string)) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ver, rev := buildVersion()
	if f.version {
		fmt.Fprintf(stdout, "veil-exporter, version %s (revision %s, %s)\n", ver, rev, runtime.Version())
		return nil
	}
	if f.configCheck {
		return checkConfig(f, stdout)
	}
	logger, webLogger, err := newLoggers(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return err
	}
	if f.webConfigFile != "" {
		if err := web.Validate(f.webConfigFile); err != nil {
			return fmt.Errorf("invalid --web.config.file: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := newDaemon(ctx, f.configFile, logger, ver, rev)
	level.Info(d.logger).Log("msg", "starting veil-exporter", "version", ver, "revision", rev, "controllers", len(cfg.Controllers))

	if _, err := d.apply(cfg); err != nil {
		return err
	}
	defer d.stop()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = d.reload() // logged and reflected in veil_config_last_reload_successful
			}
		}
	}()

	l, err := net.Listen("tcp", f.listenAddress)
	if err != nil {
		return fmt.Errorf("couldn't listen: %w", err)
	}
	if onListen != nil {
		onListen(l.Addr().String())
	}
	srv := &http.Server{Handler: d.handler(f.telemetryPath), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() {
		webFlags := &web.FlagConfig{WebListenAddresses: &[]string{f.listenAddress}, WebSystemdSocket: new(bool), WebConfigFile: &f.webConfigFile}
		errc <- web.Serve(l, srv, webFlags, webLogger)
	}()
	level.Info(d.logger).Log("msg", "listening", "address", l.Addr().String(), "telemetry_path", f.telemetryPath)
	select {
	case err := <-errc:
		return fmt.Errorf("HTTP server: %w", err)
	case <-ctx.Done():
	}
	level.Info(d.logger).Log("msg", "shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// checkConfig is --config.check: the file, its token files and the web config.
func checkConfig(f *flags, stdout io.Writer) error {
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return err
	}
	if f.webConfigFile != "" {
		if err := web.Validate(f.webConfigFile); err != nil {
			return fmt.Errorf("invalid --web.config.file %s: %w", f.webConfigFile, err)
		}
	}
	for _, c := range cfg.Controllers {
		if _, err := newClient(c, nil); err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
	}
	fmt.Fprintf(stdout, "%s: OK (%d controllers)\n", f.configFile, len(cfg.Controllers))
	return nil
}
