// The packaged systemd unit, derived from deploy/systemd/veil-exporter.service so that the two
// cannot drift: the binary in /usr/bin, flags from /etc/default/veil-exporter, and the package's
// static user instead of a dynamic one (the package makes the user; tokens are read through the
// user's group, not LoadCredential, so a missing token file does not stop the unit).
package release

import (
	"fmt"
	"strings"
)

const unitHeader = `# veil-exporter: Prometheus exporter and NATS event forwarder for ECP VeiL controllers.
# Installed by the veil-exporter package (derived from deploy/systemd/veil-exporter.service).
#
# Configure: /etc/veil-exporter/config.yaml (token files beside it, readable by the group
# veil-exporter), extra flags in ARGS of /etc/default/veil-exporter. Then:
#   systemctl enable --now veil-exporter
# Event checkpoints (and the embedded NATS store, if enabled) live in /var/lib/veil-exporter.
`

// unitEdit replaces one line of the source unit; the line must be there.
type unitEdit struct{ old, new string }

var unitEdits = []unitEdit{
	{"Type=simple", "Type=simple\nEnvironmentFile=-/etc/default/veil-exporter"},
	{"ExecStartPre=/usr/local/bin/veil-exporter --config.check --config.file=/etc/veil-exporter/config.yaml",
		"ExecStartPre=/usr/bin/veil-exporter --config.check --config.file=/etc/veil-exporter/config.yaml"},
	{"ExecStart=/usr/local/bin/veil-exporter --config.file=/etc/veil-exporter/config.yaml",
		"ExecStart=/usr/bin/veil-exporter --config.file=/etc/veil-exporter/config.yaml $ARGS"},
	{"LoadCredential=prod.token:/etc/veil-exporter/prod.token", ""},
	{"DynamicUser=yes", "User=veil-exporter\nGroup=veil-exporter"},
}

// packagedUnit turns the source unit into the packaged one. Its leading comment (how to install
// by hand) gives way to unitHeader; an edit whose line is missing is an error.
func packagedUnit(src string) (string, error) {
	lines := strings.Split(src, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "#") {
		i++
	}
	body := lines[i:]
	for _, e := range unitEdits {
		n := 0
		for j, l := range body {
			if l == e.old {
				body[j] = e.new
				n++
			}
		}
		if n != 1 {
			return "", fmt.Errorf("the unit has %d lines %q, want 1: deploy/systemd/veil-exporter.service changed, update unitEdits", n, e.old)
		}
	}
	out := unitHeader + strings.Join(body, "\n")
	out = strings.ReplaceAll(out, "\n\n\n", "\n\n")
	if strings.Contains(out, "/usr/local/") {
		return "", fmt.Errorf("the packaged unit still names /usr/local/")
	}
	return out, nil
}
