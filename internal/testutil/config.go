// This file holds the configuration files the tests of the command and of the daemon write: one
// line per controller, collection every second, guest checks and events off.

package testutil

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// SecretToken is the simulators' token in these tests; it must appear in no page, metric or log.
const SecretToken = "s3cr3t-sim-token"

// ControllerYAML is one entry of controllers:.
func ControllerYAML(name, url, tokenFile string) string {
	return fmt.Sprintf("  - name: %s\n    url: %s\n    token_file: %s\n", name, url, tokenFile)
}

// WriteConfig writes a configuration of controllers, collected every second, without guest
// checks and events.
func WriteConfig(t *testing.T, path string, controllers ...string) {
	t.Helper()
	body := "controllers:\n" + strings.Join(controllers, "") +
		"collect:\n  interval: 1s\nguest:\n  enabled: false\nevents:\n  enabled: false\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
