// Loading the configuration: ${ENV} expansion, strict YAML on top of Default, and validation
// whose every problem names the line to edit.

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads, expands, parses and validates the configuration file at path. Relative file
// paths inside it (token_file, ca_file, ...) are resolved against the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("couldn't read config: %w", err)
	}
	cfg, err := parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse expands ${ENV} references in data, parses it strictly on top of Default and
// validates the result, including that token files are readable. Relative paths are taken
// from the working directory.
func Parse(data []byte) (*Config, error) { return parse(data, "") }

func parse(data []byte, baseDir string) (*Config, error) {
	expanded, err := expandEnv(data)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(expanded, &root); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	lines := keyLines(&root)

	cfg := Default()
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty: at least one controller is required")
		}
		return nil, annotateYAMLError(err, lines)
	}
	for i := range cfg.Controllers {
		applyControllerDefaults(&cfg.Controllers[i])
		if baseDir != "" {
			c := &cfg.Controllers[i]
			c.TokenFile = resolvePath(baseDir, c.TokenFile)
			c.TLS.CAFile = resolvePath(baseDir, c.TLS.CAFile)
		}
	}
	if baseDir != "" {
		n := &cfg.NATS
		n.CredsFile = resolvePath(baseDir, n.CredsFile)
		n.NKeyFile = resolvePath(baseDir, n.NKeyFile)
		n.TLS.CAFile = resolvePath(baseDir, n.TLS.CAFile)
		n.TLS.CertFile = resolvePath(baseDir, n.TLS.CertFile)
		n.TLS.KeyFile = resolvePath(baseDir, n.TLS.KeyFile)
	}
	_, cfg.NATS.Configured = lines["nats"]
	v := validator{lines: lines}
	v.config(&cfg)
	if err := v.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func applyControllerDefaults(c *Controller) {
	if c.Timeout == 0 {
		c.Timeout = defaultControllerTimeout
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = defaultControllerConcurrency
	}
	if c.MaxRequestsPerSecond == 0 {
		c.MaxRequestsPerSecond = defaultControllerRate
	}
}

func resolvePath(base, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// envRef matches ${NAME}; a bare $ is left alone so regexps like "-test$" survive, and $${
// escapes a literal ${.
var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func expandEnv(data []byte) ([]byte, error) {
	var errs []string
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		// References in comments are left alone: the example config mentions ${VEIL_TOKEN}.
		code, comment := splitComment(line)
		lines[i] = append(envRef.ReplaceAllFunc(code, func(m []byte) []byte {
			if string(m) == "$${" {
				return []byte("${")
			}
			name := string(m[2 : len(m)-1])
			val, ok := os.LookupEnv(name)
			if !ok {
				errs = append(errs, fmt.Sprintf("line %d: environment variable %s is not set", i+1, name))
			}
			return []byte(val)
		}), comment...)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return bytes.Join(lines, []byte("\n")), nil
}

// splitComment cuts a line before a YAML comment: a '#' at the start or after a blank.
func splitComment(line []byte) (code, comment []byte) {
	for i, b := range line {
		if b == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i:i], line[i:]
		}
	}
	return line, nil
}

// keyLines maps the dotted path of every key ("controllers[0].url") to its line, so that
// validation errors can point at the line a person has to edit.
func keyLines(root *yaml.Node) map[string]int {
	out := map[string]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				out[p] = k.Line
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				out[p] = c.Line
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return out
}

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// annotateYAMLError adds the key to yaml.v3's "line N: cannot unmarshal ..." messages, which
// name only the line.
func annotateYAMLError(err error, lines map[string]int) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	byLine := map[int]string{}
	for p, l := range lines {
		if cur, ok := byLine[l]; !ok || len(p) > len(cur) {
			byLine[l] = p
		}
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if sm := yamlLine.FindStringSubmatch(m); sm != nil && !strings.Contains(m, "not found in type") {
			l, _ := strconv.Atoi(sm[1])
			if key, ok := byLine[l]; ok {
				m = fmt.Sprintf("line %d: %s: %s", l, key, strings.TrimPrefix(m, sm[0]))
			}
		}
		if strings.Contains(m, "not found in type") {
			m = strings.Replace(m, "field ", "unknown key ", 1)
		}
		msgs = append(msgs, m)
	}
	return &problems{list: msgs}
}

// problems is the error of a config that decodes or validates badly: each problem, with its line
// where the file has one, joined by "; " after prefix.
type problems struct {
	prefix string
	list   []string
}

func (p *problems) Error() string { return p.prefix + strings.Join(p.list, "; ") }

type validator struct {
	lines map[string]int
	errs  []string
}

func (v *validator) add(path, format string, args ...any) {
	msg := path + ": " + fmt.Sprintf(format, args...)
	// A key left to its default (or brought by a YAML merge key) has no line; point at the
	// nearest key above it that the file has.
	for p := path; p != ""; p = parentKey(p) {
		if l, ok := v.lines[p]; ok {
			msg = fmt.Sprintf("line %d: %s", l, msg)
			break
		}
	}
	v.errs = append(v.errs, msg)
}

// parentKey is the key above p in keyLines' paths: "nats.tls" for "nats.tls.ca_file",
// "controllers" for "controllers[0]".
func parentKey(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return &problems{prefix: "invalid config: ", list: v.errs}
}

// nameRE keeps controller names usable as a NATS subject token, a label value and a file name.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (v *validator) config(c *Config) {
	if len(c.Controllers) == 0 {
		v.add("controllers", "at least one controller is required")
	}
	seen := map[string]bool{}
	for i := range c.Controllers {
		v.controller(fmt.Sprintf("controllers[%d]", i), &c.Controllers[i], seen)
	}
	v.collect(&c.Collect)
	v.guest(&c.Guest)
	if c.Events.Enabled {
		v.events(&c.Events)
	}
	if c.Events.Enabled || c.NATS.Configured && c.InventoryOnNATS() {
		v.nats(&c.NATS)
	}
	v.ha(c)
	if c.SD.Port < 1 || c.SD.Port > 65535 {
		v.add("sd.port", "%d is not a port (1-65535)", c.SD.Port)
	}
	if len(c.SD.AllowedNetworks) == 0 {
		c.SD.AllowedNetworks = nil // "[]" and none are the same: every dump reads back alike
	}
	for i, n := range c.SD.AllowedNetworks {
		if _, err := parseNetwork(n); err != nil {
			v.add(fmt.Sprintf("sd.allowed_networks[%d]", i), "%q is not a CIDR (10.0.0.0/8, fd00::/8) or an address", n)
		}
	}
}

func (v *validator) controller(p string, c *Controller, seen map[string]bool) {
	switch {
	case c.Name == "":
		v.add(p+".name", "required")
	case !nameRE.MatchString(c.Name):
		v.add(p+".name", "%q must be 1-64 letters, digits, '_' or '-' (it is a label value and a NATS subject token)", c.Name)
	case seen[c.Name]:
		v.add(p+".name", "%q is used by another controller", c.Name)
	}
	seen[c.Name] = true
	if c.URL == "" {
		v.add(p+".url", "required")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(p+".url", "%q is not an http(s) URL with a host", RedactURL(c.URL))
	} else if u.RawQuery != "" || u.Fragment != "" {
		v.add(p+".url", "must not have a query or fragment")
	}
	switch {
	case c.Token != "" && c.TokenFile != "":
		v.add(p+".token_file", "set only one of token and token_file")
	case c.Token == "" && c.TokenFile == "":
		v.add(p+".token_file", "one of token and token_file is required")
	case c.TokenFile != "":
		v.tokenFile(p+".token_file", c.TokenFile)
	}
	v.readable(p+".tls.ca_file", c.TLS.CAFile)
	if c.Timeout < 0 {
		v.add(p+".timeout", "must be > 0")
	}
	if c.MaxConcurrency < 0 {
		v.add(p+".max_concurrency", "must be >= 1")
	}
	if c.MaxRequestsPerSecond < 0 {
		v.add(p+".max_requests_per_second", "must be > 0")
	}
}

// tokenFile checks that the file is readable and not empty; the content is never reported.
func (v *validator) tokenFile(p, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		v.add(p, "couldn't read token file: %v", pathError(err))
		return
	}
	if len(bytes.TrimSpace(b)) == 0 {
		v.add(p, "token file %s is empty", path)
	}
}

func (v *validator) readable(p, path string) {
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		v.add(p, "%v", pathError(err))
		return
	}
	f.Close()
}

// pathError keeps the message short: "open /x: permission denied".
func pathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}

func (v *validator) collect(c *Collect) {
	if c.Interval <= 0 {
		v.add("collect.interval", "must be > 0")
	}
	if c.ResyncInterval <= 0 {
		v.add("collect.resync_interval", "must be > 0")
	}
	if c.DeviceDetailsInterval != 0 && c.DeviceDetailsInterval < time.Minute {
		v.add("collect.device_details_interval", "must be 0 (off) or at least 1m: it reads every disk and interface once per interval")
	}
	if err := c.DomainInclude.err; err != nil {
		v.add("collect.domain_include", "invalid regexp: %v", err)
	}
	if err := c.DomainExclude.err; err != nil {
		v.add("collect.domain_exclude", "invalid regexp: %v", err)
	}
	if err := c.BackupTaskPattern.err; err != nil {
		v.add("collect.backup_task_pattern", "invalid regexp: %v", err)
	}
	if c.BackupLookback < 0 {
		v.add("collect.backup_lookback", "must be >= 0")
	}
}

func (v *validator) guest(g *Guest) {
	for _, d := range []struct {
		key string
		val time.Duration
	}{
		{"guest.ping_interval", g.PingInterval},
		{"guest.osinfo_interval", g.OSInfoInterval},
		{"guest.fsinfo_interval", g.FSInfoInterval},
		{"guest.time_interval", g.TimeInterval},
		{"guest.command_timeout", g.CommandTimeout},
		{"guest.network_interval", g.NetworkInterval},
	} {
		if d.val <= 0 {
			v.add(d.key, "must be > 0")
		}
	}
	if g.StatsInterval < 0 {
		v.add("guest.stats_interval", "must be >= 0 (0: off)")
	}
	if g.Concurrency < 1 {
		v.add("guest.concurrency", "must be >= 1")
	}
	if err := g.FSMountpointsExclude.err; err != nil {
		v.add("guest.fs_mountpoints_exclude", "invalid regexp: %v", err)
	}
	if err := g.NetworkInterfacesExclude.err; err != nil {
		v.add("guest.network_interfaces_exclude", "invalid regexp: %v", err)
	}
	if err := g.DiskDevicesExclude.err; err != nil {
		v.add("guest.disk_devices_exclude", "invalid regexp: %v", err)
	}
}

func (v *validator) events(e *Events) {
	if e.PollInterval <= 0 {
		v.add("events.poll_interval", "must be > 0")
	}
	if e.PageSize < 4 || e.PageSize > 100 { // a page repeats a row of the previous one and keeps a margin: below 4 it cannot advance
		v.add("events.page_size", "%d is out of range 4..100", e.PageSize)
	}
	v.enum("events.order", e.Order, "auto", "newest_first", "oldest_first")
	v.enum("events.start", e.Start, "latest", "earliest")
	v.enum("events.checkpoint.store", e.Checkpoint.Store, "file", "nats_kv")
	if e.Checkpoint.Store == "file" && e.Checkpoint.Dir == "" {
		v.add("events.checkpoint.dir", "required with store: file")
	}
}

func (v *validator) enum(p, val string, allowed ...string) {
	for _, a := range allowed {
		if val == a {
			return
		}
	}
	v.add(p, "%q is not one of %s", val, strings.Join(allowed, ", "))
}

func (v *validator) nats(n *NATS) {
	if n.Inventory.Enabled {
		if !nameRE.MatchString(n.Inventory.Bucket) {
			v.add("nats.inventory.bucket", "%q is not a bucket name (letters, digits, '-' and '_')", n.Inventory.Bucket)
		}
		if n.Inventory.History < 1 || n.Inventory.History > 64 {
			v.add("nats.inventory.history", "must be 1..64")
		}
	}
	if !n.Embedded.Enabled {
		// A comma-separated list names several servers of one cluster; each must be a URL. The
		// whole list is quoted, redacted as one: a ',' in a password would split it.
		for _, one := range strings.Split(n.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" || !oneOf(u.Scheme, "nats", "tls", "ws", "wss") {
				v.add("nats.url", "%q is not a nats://, tls://, ws:// or wss:// URL (or a comma-separated list of them) with a host", RedactURL(n.URL))
				break
			}
		}
	} else if _, _, err := net.SplitHostPort(n.Embedded.Listen); err != nil {
		v.add("nats.embedded.listen", "%q is not host:port", n.Embedded.Listen)
	}
	auth := 0
	for _, s := range []string{n.CredsFile, n.NKeyFile, n.User} {
		if s != "" {
			auth++
		}
	}
	if auth > 1 {
		v.add("nats", "set at most one of creds_file, nkey_file and user/password")
	}
	if n.Password != "" && n.User == "" {
		v.add("nats.password", "needs nats.user")
	}
	v.readable("nats.creds_file", n.CredsFile)
	v.readable("nats.nkey_file", n.NKeyFile)
	v.readable("nats.tls.ca_file", n.TLS.CAFile)
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		v.add("nats.tls", "set both cert_file and key_file or neither")
	}
	v.readable("nats.tls.cert_file", n.TLS.CertFile)
	v.readable("nats.tls.key_file", n.TLS.KeyFile)
	if !validSubject(n.SubjectPrefix) {
		v.add("nats.subject_prefix", "%q is not a NATS subject without wildcards", n.SubjectPrefix)
	}
	js := n.JetStream
	if js.Enabled {
		if js.Stream == "" || strings.ContainsAny(js.Stream, ".*> \t\r\n/\\") {
			v.add("nats.jetstream.stream", "%q is not a valid stream name", js.Stream)
		}
		if js.DuplicateWindow <= 0 {
			v.add("nats.jetstream.duplicate_window", "must be > 0")
		}
		if js.PublishTimeout <= 0 {
			v.add("nats.jetstream.publish_timeout", "must be > 0")
		}
		if js.MaxPending < 1 {
			v.add("nats.jetstream.max_pending", "must be >= 1")
		}
	}
	if n.Embedded.Enabled && n.Embedded.StoreDir == "" {
		v.add("nats.embedded.store_dir", "required when the embedded server is enabled")
	}
	if err := n.Embedded.Sync.check(); err != nil {
		v.add("nats.embedded.sync", "%v", err)
	}
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
}
