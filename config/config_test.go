package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseAppliesDefaults(t *testing.T) {
	cfg, err := Parse([]byte("controllers:\n  - name: prod\n    url: https://veil.example.com\n    token: abc\nevents: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Controllers[0]
	if c.Timeout != 10*time.Second || c.MaxConcurrency != 8 || c.MaxRequestsPerSecond != 50 {
		t.Errorf("controller defaults not applied: %+v", c)
	}
	def := Default()
	if !reflect.DeepEqual(cfg.Collect, def.Collect) {
		t.Errorf("collect = %+v, want defaults %+v", cfg.Collect, def.Collect)
	}
	if cfg.Guest.PingInterval != 30*time.Second || len(cfg.Guest.FSTypesExclude) != 8 {
		t.Errorf("guest defaults not applied: %+v", cfg.Guest)
	}
	if cfg.Events.Enabled {
		t.Error("events.enabled: false was not honoured")
	}
	if cfg.Events.PageSize != 100 || cfg.NATS.JetStream.Stream != "VEIL_EVENTS" {
		t.Errorf("nested defaults lost when a sibling key is set: %+v %+v", cfg.Events, cfg.NATS.JetStream)
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal("config.example.yaml must exist and be valid:", err)
	}
	// The example points at /etc/...; replace the token file by a readable one.
	tok := writeFile(t, t.TempDir(), "prod.token", "jwt secret\n")
	data = []byte(strings.ReplaceAll(string(data), "/etc/veil-exporter/prod.token", tok))
	cfg, err := Parse(data)
	if err != nil {
		t.Fatalf("example config rejected: %v", err)
	}
	def := Default()
	if !reflect.DeepEqual(cfg.Collect, def.Collect) || cfg.Events != def.Events || cfg.NATS.JetStream != def.NATS.JetStream || !reflect.DeepEqual(cfg.SD, def.SD) {
		t.Error("the example's values differ from Default(); one of them is out of date")
	}
}

func TestParseRejects(t *testing.T) {
	dir := t.TempDir()
	tok := writeFile(t, dir, "tok", "jwt abc\n")
	empty := writeFile(t, dir, "empty", "\n")
	base := "controllers:\n  - name: prod\n    url: https://veil.example.com\n    token_file: " + tok + "\n"
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"unknown key names line and key", base + "collect:\n  intervall: 30s\n", []string{"line 6", "intervall"}},
		{"unknown controller key", base + "    max_conns: 3\n", []string{"line 5", "max_conns"}},
		{"bad duration names line and key", base + "collect:\n  interval: soon\n", []string{"line 6", "collect.interval"}},
		{"bad int names key", base + "events:\n  page_size: many\n", []string{"line 6", "events.page_size"}},
		{"no controllers", "collect: {interval: 10s}\n", []string{"controllers", "at least one"}},
		{"empty file", "", []string{"at least one controller"}},
		{"duplicate names", base + "  - name: prod\n    url: https://b.example.com\n    token: x\n", []string{"line 5", "controllers[1].name", "another controller"}},
		{"name with dot", strings.Replace(base, "name: prod", "name: pr.od", 1), []string{"line 2", "controllers[0].name"}},
		{"url without scheme", strings.Replace(base, "https://veil.example.com", "veil.example.com", 1), []string{"line 3", "controllers[0].url"}},
		{"both token and file", base + "    token: x\n", []string{"set only one"}},
		{"neither token nor file", "controllers:\n  - name: a\n    url: http://x\n", []string{"one of token and token_file is required"}},
		{"unreadable token file", strings.Replace(base, tok, filepath.Join(dir, "missing"), 1), []string{"line 4", "token_file", "no such file"}},
		{"empty token file", strings.Replace(base, tok, empty, 1), []string{"token file", "is empty"}},
		{"zero interval", base + "collect:\n  interval: 0s\n", []string{"collect.interval", "must be > 0"}},
		{"device details too often", base + "collect:\n  device_details_interval: 30s\n", []string{"collect.device_details_interval", "at least 1m"}},
		{"negative timeout", base + "    timeout: -1s\n", []string{"controllers[0].timeout"}},
		{"bad regexp", base + "collect:\n  domain_include: \"([\"\n", []string{"line 6", "collect.domain_include", "invalid regexp"}},
		{"page size over 100", base + "events:\n  page_size: 101\n", []string{"events.page_size", "4..100"}},
		{"page size zero", base + "events:\n  page_size: 0\n", []string{"events.page_size"}},
		{"page size under 4", base + "events:\n  page_size: 3\n", []string{"events.page_size", "4..100"}},
		{"bad order", base + "events:\n  order: random\n", []string{"events.order", "auto, newest_first, oldest_first"}},
		{"bad start", base + "events:\n  start: middle\n", []string{"events.start"}},
		{"bad store", base + "events:\n  checkpoint: {store: redis}\n", []string{"events.checkpoint.store"}},
		{"bad nats url", base + "nats:\n  url: http://x\n", []string{"nats.url"}},
		{"wildcard subject", base + "nats:\n  subject_prefix: veil.*\n", []string{"nats.subject_prefix"}},
		{"two nats auths", base + "nats:\n  user: u\n  creds_file: " + tok + "\n", []string{"at most one"}},
		{"cert without key", base + "nats:\n  tls: {cert_file: " + tok + "}\n", []string{"cert_file and key_file"}},
		{"guest concurrency", base + "guest:\n  concurrency: 0\n", []string{"guest.concurrency"}},
		{"guest stats interval", base + "guest:\n  stats_interval: -1s\n", []string{"guest.stats_interval", "must be >= 0"}},
		{"guest disk exclude", base + "guest:\n  disk_devices_exclude: '(vd'\n", []string{"guest.disk_devices_exclude", "invalid regexp"}},
		{"unset env var", strings.Replace(base, "token_file: "+tok, "token: ${VEIL_TEST_UNSET_VAR}", 1), []string{"line 4", "VEIL_TEST_UNSET_VAR is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestUnusedNATSSkipsNATSValidation: a nats: section is validated when something uses it (events,
// or the inventory bucket, which a nats: section turns on), and only then.
func TestUnusedNATSSkipsNATSValidation(t *testing.T) {
	const head = "controllers:\n  - {name: a, url: 'http://x', token: t}\nevents: {enabled: false}\n"
	if _, err := Parse([]byte(head + "nats: {url: 'bogus', inventory: {enabled: false}}\n")); err != nil {
		t.Errorf("NATS settings are irrelevant without events and the inventory bucket, got %v", err)
	}
	if _, err := Parse([]byte(head + "nats: {url: 'bogus'}\n")); err == nil || !strings.Contains(err.Error(), "nats.url") {
		t.Errorf("a nats: section writes the inventory bucket, so its URL is checked; got %v", err)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Setenv("VEIL_TEST_TOKEN", "s3cr3t-token")
	t.Setenv("VEIL_TEST_URL", "https://env.example.com")
	cfg, err := Parse([]byte("controllers:\n  - name: a\n    url: ${VEIL_TEST_URL}\n    token: ${VEIL_TEST_TOKEN}\ncollect:\n  domain_exclude: \"-test$\"\n  domain_include: \"$${LITERAL}\"\nevents: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cfg.Controllers[0].Token); got != "s3cr3t-token" {
		t.Errorf("token = %q", got)
	}
	if cfg.Controllers[0].URL != "https://env.example.com" {
		t.Errorf("url = %q", cfg.Controllers[0].URL)
	}
	if cfg.Collect.DomainExclude.String() != "-test$" {
		t.Errorf("a bare $ must survive expansion, got %q", cfg.Collect.DomainExclude)
	}
	if cfg.Collect.DomainInclude.String() != "${LITERAL}" {
		t.Errorf("$${ must escape, got %q", cfg.Collect.DomainInclude)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Setenv("VEIL_TEST_TOKEN", "s3cr3t-token")
	cfg, err := Parse([]byte("controllers:\n  - {name: a, url: 'http://x', token: '${VEIL_TEST_TOKEN}'}\nnats: {user: u, password: 'pa55word'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		string(out),
		fmtAll(cfg),
	} {
		if strings.Contains(s, "s3cr3t-token") || strings.Contains(s, "pa55word") {
			t.Errorf("secret printed: %s", s)
		}
	}
}

func TestLoadResolvesRelativePathsAgainstConfigDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "prod.token", "abc")
	p := writeFile(t, dir, "veil.yaml", "controllers:\n  - {name: a, url: 'http://x', token_file: prod.token}\nevents: {enabled: false}\n")
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "prod.token"); cfg.Controllers[0].TokenFile != want {
		t.Errorf("token_file = %q, want %q", cfg.Controllers[0].TokenFile, want)
	}
	if _, err := Load(filepath.Join(dir, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
}

func fmtAll(cfg *Config) string { return fmt.Sprintf("%v %+v %s", cfg, *cfg, cfg.Controllers[0].Token) }

// TestInvalidURLErrorHidesPassword: a rejected controller or NATS URL is quoted in the error
// with its userinfo masked, whether url.Parse accepts it or not, and the host is still shown
// so that the person can find the line.
func TestInvalidURLErrorHidesPassword(t *testing.T) {
	const pw = "pa55w0rd"
	tests := []struct {
		name string
		key  string // controllers[0].url or nats.url
		url  string
		want string // quoted in the error instead
	}{
		{"controller with a wrong scheme", "controllers[0].url", "ftp://admin:" + pw + "@veil.example.com", `"ftp://xxxxx@veil.example.com"`},
		{"controller without a host", "controllers[0].url", "https://admin:" + pw + "@", `"https://xxxxx@"`},
		{"controller url.Parse rejects", "controllers[0].url", "https://admin:" + pw + "%zz@veil.example.com", `"https://xxxxx@veil.example.com"`},
		{"controller without a scheme", "controllers[0].url", "admin:" + pw + "@veil.example.com", `"xxxxx@veil.example.com"`},
		{"nats with a wrong scheme", "nats.url", "http://user:" + pw + "@127.0.0.1:4222", `"http://xxxxx@127.0.0.1:4222"`},
		{"nats password with a slash", "nats.url", "nats://user:" + pw[:4] + "/" + pw[4:] + "@127.0.0.1:4222", `"nats://xxxxx@127.0.0.1:4222"`},
		{"nats password with an at sign, no host", "nats.url", "nats://user:" + pw[:4] + "@" + pw[4:] + "@", `"nats://xxxxx@"`},
		{"nats password with a space", "nats.url", "nats://user:" + pw + " @127.0.0.1:4222", `"nats://xxxxx@127.0.0.1:4222"`},
		{"nats without a scheme", "nats.url", "user:" + pw + "@127.0.0.1:4222", `"xxxxx@127.0.0.1:4222"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl, nats := "https://veil.example.com", "nats://127.0.0.1:4222"
			if tt.key == "nats.url" {
				nats = tt.url
			} else {
				ctrl = tt.url
			}
			yml := fmt.Sprintf("controllers:\n  - {name: a, url: '%s', token: t}\nevents: {enabled: true}\nnats: {url: '%s'}\n", ctrl, nats)
			_, err := Parse([]byte(yml))
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			msg := err.Error()
			for _, leak := range []string{pw, pw[:4], pw[4:]} {
				if strings.Contains(msg, leak) {
					t.Errorf("error shows the password (%q): %s", leak, msg)
				}
			}
			if !strings.Contains(msg, tt.key) || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not name %s with %s", msg, tt.key, tt.want)
			}
		})
	}
}

func TestBackupAndGuestNetworkSettings(t *testing.T) {
	d := Default()
	if got := time.Duration(d.Collect.BackupLookback); got != 7*24*time.Hour {
		t.Errorf("default backup_lookback = %v, want 168h", got)
	}
	if !d.Collect.BackupTaskPattern.Regexp().MatchString("Резервное копирование ВМ x") ||
		!d.Collect.BackupTaskPattern.Regexp().MatchString("Backup of the virtual machine x.") {
		t.Errorf("default backup_task_pattern %q misses a backup task", d.Collect.BackupTaskPattern)
	}
	for _, mp := range []string{"/var/lib/kubelet/pods/x", "/run/user/0", "/dev/shm"} {
		if !d.Guest.FSMountpointsExclude.Regexp().MatchString(mp) {
			t.Errorf("default fs_mountpoints_exclude keeps %s", mp)
		}
	}
	for _, mp := range []string{"/", "/var", "/home", "/srv/data", "/devices"} {
		if d.Guest.FSMountpointsExclude.Regexp().MatchString(mp) {
			t.Errorf("default fs_mountpoints_exclude drops %s", mp)
		}
	}
	c, err := Parse([]byte("controllers: [{name: a, url: http://x, token: t}]\ncollect: {backup_lookback: 36h}\nguest: {network_interval: 2m, network_interfaces_exclude: '^(lo|docker.*)$'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Collect.BackupLookback) != 36*time.Hour || c.Guest.NetworkInterval != 2*time.Minute {
		t.Errorf("parsed %v %v", c.Collect.BackupLookback, c.Guest.NetworkInterval)
	}
	_, err = Parse([]byte("controllers: [{name: a, url: http://x, token: t}]\ncollect: {backup_task_pattern: '('}\nguest: {fs_mountpoints_exclude: '['}\n"))
	if err == nil || !strings.Contains(err.Error(), "collect.backup_task_pattern") || !strings.Contains(err.Error(), "guest.fs_mountpoints_exclude") {
		t.Errorf("bad regexps: err = %v", err)
	}
}

// TestGuestStatsSettings: stats_interval defaults to 1m like network_interval; the disk
// exclusion defaults to node_exporter's, which keeps whole disks (vda, sda, nvme0n1, dm-0) and
// drops partitions, loop, RAM and floppy devices; both can be set.
func TestGuestStatsSettings(t *testing.T) {
	d := Default().Guest
	if d.StatsInterval != time.Minute {
		t.Errorf("default stats_interval = %v, want 1m", d.StatsInterval)
	}
	for _, dev := range []string{"vda1", "vda15", "sda2", "xvdb1", "nvme0n1p1", "loop0", "loop12", "ram0", "zram0", "fd0"} {
		if !d.DiskDevicesExclude.Regexp().MatchString(dev) {
			t.Errorf("default disk_devices_exclude keeps %s", dev)
		}
	}
	for _, dev := range []string{"vda", "vdb", "sda", "xvda", "nvme0n1", "dm-0", "md0", "sr0"} {
		if d.DiskDevicesExclude.Regexp().MatchString(dev) {
			t.Errorf("default disk_devices_exclude drops %s", dev)
		}
	}
	c, err := Parse([]byte("controllers: [{name: a, url: http://x, token: t}]\nguest: {stats_interval: 5m, disk_devices_exclude: '^dm-'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Guest.StatsInterval != 5*time.Minute || c.Guest.DiskDevicesExclude.String() != "^dm-" {
		t.Errorf("parsed stats_interval %v, disk_devices_exclude %q", c.Guest.StatsInterval, c.Guest.DiskDevicesExclude)
	}
}

// TestEmbeddedSync: nats.embedded.sync is "always" or a positive Go duration, anything else is
// refused with its line; left out, it is the default.
func TestEmbeddedSync(t *testing.T) {
	base := "controllers: [{name: a, url: 'http://x', token: t}]\nnats:\n  embedded:\n    enabled: true\n"
	tests := []struct {
		name    string
		setting string // the line under embedded; empty leaves the key out
		want    DiskSync
		wantErr []string // substrings of the error; nil when accepted
	}{
		{"left out is the default", "", Default().NATS.Embedded.Sync, nil},
		{"null is the default", "sync:", Default().NATS.Embedded.Sync, nil},
		{"always", "sync: always", DiskSync{Always: true}, nil},
		{"seconds", "sync: 1s", DiskSync{Interval: time.Second}, nil},
		{"milliseconds", "sync: 250ms", DiskSync{Interval: 250 * time.Millisecond}, nil},
		{"NATS's own default", "sync: 2m", DiskSync{Interval: 2 * time.Minute}, nil},
		{"quoted", `sync: "10s"`, DiskSync{Interval: 10 * time.Second}, nil},
		{"a word", "sync: fast", DiskSync{}, []string{"line 5", "nats.embedded.sync", `"fast" is neither always nor a duration`}},
		{"capitalised", "sync: Always", DiskSync{}, []string{"line 5", "nats.embedded.sync", `"Always"`}},
		{"a number without unit", "sync: 1", DiskSync{}, []string{"line 5", "nats.embedded.sync", `"1"`}},
		{"empty", `sync: ""`, DiskSync{}, []string{"line 5", "nats.embedded.sync", `""`}},
		{"zero", "sync: 0s", DiskSync{}, []string{"line 5", "nats.embedded.sync", "must be > 0"}},
		{"negative", "sync: -1s", DiskSync{}, []string{"line 5", "nats.embedded.sync", "must be > 0"}},
		{"never", "sync: never", DiskSync{}, []string{"nats.embedded.sync", `"never"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := base
			if tt.setting != "" {
				yml += "    " + tt.setting + "\n"
			}
			cfg, err := Parse([]byte(yml))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got := cfg.NATS.Embedded.Sync; got != tt.want {
					t.Errorf("sync = %+v, want %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %+v, want an error", cfg.NATS.Embedded.Sync)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestDiskSyncDefaultIsAShortInterval: the default bounds what a power loss of the embedded
// server's host drops to a second of acknowledged events, not NATS's own two minutes.
func TestDiskSyncDefaultIsAShortInterval(t *testing.T) {
	s := Default().NATS.Embedded.Sync
	if s.Always || s.Interval <= 0 || s.Interval > time.Second {
		t.Errorf("default sync = %v, want an interval of at most 1s", s)
	}
}

// TestDiskSyncRoundTrips: a dumped configuration reads back the same setting.
func TestDiskSyncRoundTrips(t *testing.T) {
	for _, s := range []DiskSync{{Always: true}, {Interval: time.Second}, {Interval: 1500 * time.Millisecond}, {Interval: 2 * time.Minute}} {
		out, err := yaml.Marshal(Embedded{Sync: s})
		if err != nil {
			t.Fatal(err)
		}
		var back Embedded
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if back.Sync != s || back.Sync.check() != nil {
			t.Errorf("%v dumped as %q reads back as %+v", s, out, back.Sync)
		}
	}
}

// TestRegexpsCompiledAtLoad: a regexp of the configuration comes out of Parse compiled, unset
// ones nil, and writes back as it was read.
func TestRegexpsCompiledAtLoad(t *testing.T) {
	cfg, err := Parse([]byte("controllers: [{name: a, url: http://x, token: t}]\ncollect: {domain_include: '^web-'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	re := cfg.Collect.DomainInclude.Regexp()
	if re == nil || !re.MatchString("web-1") || re.MatchString("db-1") {
		t.Errorf("domain_include compiled to %v", re)
	}
	if cfg.Collect.DomainExclude.Regexp() != nil {
		t.Error("an unset domain_exclude compiled to something")
	}
	out, err := yaml.Marshal(cfg.Collect)
	if err != nil || !strings.Contains(string(out), "domain_include: ^web-\n") {
		t.Errorf("written back as\n%s(%v)", out, err)
	}
}
