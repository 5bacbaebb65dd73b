package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/go-kit/log/level"
)

// TestWebLoggerBridge: what the exporter-toolkit logs through slog reaches the go-kit output
// with its groups, its level filtered by --log.level (Enabled says so before a record is built),
// one "ts" like every other line, the slog call site as caller and component=web.
func TestWebLoggerBridge(t *testing.T) {
	var out bytes.Buffer
	kit, sl, err := newLoggers(&out, "info", "logfmt")
	if err != nil {
		t.Fatal(err)
	}
	if sl.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("Enabled(debug) at --log.level info")
	}
	if !sl.Enabled(context.Background(), slog.LevelWarn) {
		t.Error("not Enabled(warn) at --log.level info")
	}
	sl.Debug("hidden debug line")
	sl.WithGroup("tls").With("min_version", "1.2").Warn("TLS is enabled", slog.Group("client", "auth", "none"), "address", "[::]:9867")
	level.Info(kit).Log("msg", "a go-kit line")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the warning and the go-kit line, got:\n%s", out.String())
	}
	web := lines[0]
	for _, want := range []string{"level=warn", `msg="TLS is enabled"`, "component=web", "tls.min_version=1.2", "tls.client.auth=none", "tls.address=[::]:9867"} {
		if !strings.Contains(web, want) {
			t.Errorf("bridged line lacks %s: %s", want, web)
		}
	}
	if !regexp.MustCompile(`^ts=\d{4}-\d\d-\d\dT[0-9:.]+Z `).MatchString(web) || strings.Count(web, "ts=") != 1 || strings.Contains(web, "time=") {
		t.Errorf("bridged line does not start with one UTC ts: %s", web)
	}
	if !regexp.MustCompile(`caller=log_test\.go:\d+`).MatchString(web) || strings.Count(web, "caller=") != 1 {
		t.Errorf("bridged line's caller is not the slog call site: %s", web)
	}
	if !regexp.MustCompile(`^level=info ts=\S+Z caller=log_test\.go:\d+ msg="a go-kit line"$`).MatchString(lines[1]) {
		t.Errorf("go-kit line: %s", lines[1])
	}
}

// TestWebLoggerJSON: --log.format json gives one JSON object per bridged line, groups flattened
// (go-kit's JSON logger writes non-string values through their String method).
func TestWebLoggerJSON(t *testing.T) {
	var out bytes.Buffer
	_, sl, err := newLoggers(&out, "debug", "json")
	if err != nil {
		t.Fatal(err)
	}
	sl.WithGroup("http").Debug("served", "code", 200)
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if m["level"] != "debug" || m["msg"] != "served" || m["http.code"] != "200" || m["component"] != "web" || m["ts"] == nil || m["time"] != nil {
		t.Errorf("json line: %s", out.String())
	}
}
