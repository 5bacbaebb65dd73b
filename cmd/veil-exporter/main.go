// Command veil-exporter exports the inventory of ECP VeiL controllers as Prometheus metrics,
// checks guest agents and forwards the platform's events to NATS.
//
// It owns the flags, logging and signals and wires the daemon's actors (oklog/run); it imports
// config and internal/daemon only.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	oklog "github.com/oklog/run"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	sloggokit "github.com/tjhop/slog-gokit"

	"github.com/veil-exporter/veil-exporter/config"
	"github.com/veil-exporter/veil-exporter/internal/daemon"
)

// The build is stamped through github.com/prometheus/common/version (Version, Revision, Branch,
// BuildUser, BuildDate) by the Makefile (make build, make image).

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "veil-exporter:", err)
		os.Exit(1)
	}
}

type flags struct {
	configFile  string
	configCheck bool
	web         *web.FlagConfig
	handler     daemon.HandlerOptions
	logLevel    string
	logFormat   string
	version     bool
	help        bool // --help or -h was given: the usage is printed, nothing else runs
	memLimit    bool // --auto-gomemlimit
}

// parseFlags parses args as every Prometheus exporter does (kingpin, exporter-toolkit's web
// flags, promslog's log flags); the usage goes to stdout.
func parseFlags(args []string, stdout io.Writer) (*flags, error) {
	f := &flags{}
	app := kingpin.New("veil-exporter", "Exports the inventory of ECP VeiL controllers as Prometheus metrics, checks guest agents and forwards the platform's events to NATS.")
	app.UsageWriter(stdout)
	app.ErrorWriter(io.Discard) // the error is returned, and main prints it once
	app.HelpFlag.Short('h')
	app.Terminate(func(int) { f.help = true }) // only --help terminates: no app.Version
	app.Flag("config.file", "Configuration file.").Default("config.yaml").StringVar(&f.configFile)
	app.Flag("config.check", "Validate the configuration (and its token files and --web.config.file) and exit 0 or 1.").BoolVar(&f.configCheck)
	f.web = kingpinflag.AddFlags(app, ":9867")
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.handler.TelemetryPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests. Use 0 to disable.").Default("40").IntVar(&f.handler.MaxRequests)
	app.Flag("web.write-timeout", "Maximum time to send a response (every endpoint); a client that stops reading is dropped then. 0 disables it.").Default(daemon.DefaultWriteTimeout.String()).DurationVar(&f.handler.WriteTimeout)
	app.Flag("web.enable-lifecycle", "Enable reload via HTTP request (POST or PUT /-/reload).").BoolVar(&f.handler.EnableLifecycle)
	app.Flag("web.disable-exporter-metrics", "Exclude metrics about the exporter itself (promhttp_*, process_*, go_*).").BoolVar(&f.handler.DisableExporterMetrics)
	app.Flag("web.disable-openmetrics", "Never answer in OpenMetrics: scrapers that ask for it first get their next choice (protobuf or text).").BoolVar(&f.handler.DisableOpenMetrics)
	app.Flag("web.openmetrics-created-samples", "Add a _created series for every counter, histogram and summary that has a start time to OpenMetrics answers (protobuf answers always carry it).").BoolVar(&f.handler.CreatedSamples)
	app.Flag("auto-gomemlimit", "Set the Go soft memory limit (GOMEMLIMIT) to 90% of the cgroup's memory limit, so the GC slows the heap's growth near it instead of the process being killed. An explicit GOMEMLIMIT wins.").Default("true").BoolVar(&f.memLimit)
	logCfg := &promslog.Config{}
	promslogflag.AddFlags(app, logCfg)
	app.Flag("version", "Show the version and exit.").BoolVar(&f.version)
	if _, err := app.Parse(doubleDash(app, args)); err != nil {
		if f.help {
			return f, nil // kingpin printed the usage, then failed on the missing command
		}
		return nil, err
	}
	f.logLevel, f.logFormat = logCfg.Level.String(), logCfg.Format.String()
	return f, nil
}

// doubleDash turns the old single-dash spellings of the long flags (-config.file, the stdlib
// flag style of earlier versions) into the double-dash ones kingpin parses.
func doubleDash(app *kingpin.Application, args []string) []string {
	long := map[string]bool{}
	for _, fl := range app.Model().Flags {
		long[fl.Name] = true
		if fl.IsBoolFlag() {
			long["no-"+fl.Name] = true
		}
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && long[name] {
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

var stampOnce sync.Once

// stampVersion fills what the linker did not stamp from the Go build info, so that
// veil_exporter_build_info and --version never show an empty version.
func stampVersion() {
	stampOnce.Do(func() {
		if version.Version != "" {
			return
		}
		version.Version = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version.Version = bi.Main.Version
		}
	})
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

// run is the whole daemon; onListen (tests) learns each bound address.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, onListen func(addr string)) error {
	f, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	if f.help {
		return nil
	}
	stampVersion()
	if f.version {
		fmt.Fprintln(stdout, version.Print("veil-exporter"))
		return nil
	}
	if f.configCheck {
		return checkConfig(f, stdout)
	}
	base, webLogger, err := newLoggers(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	setGCPercent(log.With(base, "component", "daemon"), defaultGCPercent)
	if f.memLimit {
		setMemLimit(log.With(base, "component", "daemon"), memlimit.FromCgroup)
	}
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return err
	}
	if *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return fmt.Errorf("invalid --web.config.file: %w", err)
		}
	}
	d, err := daemon.New(cfg, daemon.Options{ConfigFile: f.configFile, Logger: base, Version: version.Version})
	if err != nil {
		return err
	}
	return serve(ctx, d, f, serveLogs{daemon: log.With(base, "component", "daemon"), web: webLogger}, onListen)
}

// serveLogs are serve's loggers: the daemon's, and the web server's (exporter-toolkit's).
type serveLogs struct {
	daemon log.Logger
	web    *slog.Logger
}

// serve runs the daemon's actors until ctx is done or one of them fails. Each actor is
// interrupted in the order they are added: the HTTP server stops answering, SIGHUP is no longer
// heard, and the daemon hands this replica's controllers over (its coordinator) and stops the rest.
func serve(ctx context.Context, d *daemon.Daemon, f *flags, logs serveLogs, onListen func(addr string)) error {
	logger, webLogger := logs.daemon, logs.web
	var g oklog.Group
	ctx, cancel := context.WithCancel(ctx)
	g.Add(func() error {
		<-ctx.Done()
		level.Info(logger).Log("msg", "shutting down")
		return nil
	}, func(error) { cancel() })

	srv := &http.Server{Handler: d.Handler(f.handler), ReadHeaderTimeout: 10 * time.Second}
	if f.handler.WriteTimeout > 0 {
		// Behind the handler's own deadline per response, which it sets when it starts: the
		// server's counts from the request's headers, a second more for the handler's start.
		srv.WriteTimeout = f.handler.WriteTimeout + time.Second
	}
	if onListen != nil {
		// Called by Serve with each listener, once it listens (":0" in tests).
		srv.BaseContext = func(l net.Listener) context.Context {
			onListen(l.Addr().String())
			return context.Background()
		}
	}
	g.Add(func() error {
		if err := web.ListenAndServe(srv, f.web, webLogger); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("HTTP server: %w", err)
		}
		return nil
	}, func(error) {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	g.Add(func() error {
		for {
			select {
			case <-hupDone:
				return nil
			case <-hup:
				_ = d.Reload() // logged and reflected in veil_config_last_reload_successful
			}
		}
	}, func(error) {
		signal.Stop(hup)
		close(hupDone)
	})

	g.Add(func() error { return d.Run(context.Background()) }, func(error) { d.Stop() })
	return g.Run()
}

// checkConfig is --config.check: the file, its token files and the web config.
func checkConfig(f *flags, stdout io.Writer) error {
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return err
	}
	if *f.web.WebConfigFile != "" {
		if err := web.Validate(*f.web.WebConfigFile); err != nil {
			return fmt.Errorf("invalid --web.config.file %s: %w", *f.web.WebConfigFile, err)
		}
	}
	for _, c := range cfg.Controllers {
		if _, err := daemon.NewClient(c, nil); err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
	}
	for _, w := range durabilityWarnings(cfg) {
		fmt.Fprintf(stdout, "%s: WARNING: %s\n", f.configFile, w)
	}
	fmt.Fprintf(stdout, "%s: OK (%d controllers)\n", f.configFile, len(cfg.Controllers))
	return nil
}

// durabilityWarnings says where a valid cfg can lose acknowledged events to NATS's deferred
// fsync (README: NATS durability): a single-replica stream on a server that does not sync every
// write. Only what the file says is known: an existing stream's replicas and an external
// server's sync_interval are not, so these name the stream veil-exporter creates and the
// server's setting as a condition. Core NATS acknowledges nothing and is not warned about.
func durabilityWarnings(cfg *config.Config) []string {
	n := cfg.NATS
	if !cfg.Events.Enabled || !n.JetStream.Enabled {
		return nil
	}
	const republished = "they will be republished from the journal while it still holds them"
	if n.Embedded.Enabled {
		if n.Embedded.Sync.Always {
			return nil
		}
		return []string{fmt.Sprintf("nats.embedded.sync is %s and the embedded server's stream has 1 replica: "+
			"a power loss of this host can drop the events acknowledged in the last %[1]s; %s. "+
			"Set nats.embedded.sync: always if even a republish is unwanted.", n.Embedded.Sync, republished)}
	}
	if !n.JetStream.CreateStream {
		return nil // the operator's stream: its replicas are not in this file
	}
	how, fix := "without ha", "enable ha with ha.replicas: 3 on a 3-node NATS cluster"
	if cfg.HA.Enabled {
		if cfg.HA.Replicas > 1 {
			return nil
		}
		how, fix = "ha.replicas: 1", "set ha.replicas: 3 on a 3-node NATS cluster"
	}
	return []string{fmt.Sprintf("the stream %s, when veil-exporter creates it, has 1 replica (%s): "+
		"if the NATS server's sync_interval is not always, a power loss can drop acknowledged events; %s. "+
		"To avoid it, %s, or set sync_interval: always on the server.", n.JetStream.Stream, how, republished, fix)}
}
