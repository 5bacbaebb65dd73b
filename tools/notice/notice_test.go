// Tests of NOTICE: the committed file is what the generator writes for today's modules, and a
// module without a license file is refused.
package notice

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoticeMatchesLinkedModules fails when NOTICE differs from what the generator writes, as it
// does after a module of the daemon is added, removed or upgraded: `make notice` then fixes it.
func TestNoticeMatchesLinkedModules(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := Generate(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("NOTICE is not what the modules the binary links give (%d bytes, want %d): run make notice", len(got), len(want))
	}
	for _, m := range []string{"github.com/prometheus/client_golang", "github.com/nats-io/nats.go", "Go standard library"} {
		if !bytes.Contains(got, []byte("\n"+m+" ")) {
			t.Errorf("NOTICE has no section for %s", m)
		}
	}
}

// TestRenderRefusesModuleWithoutLicense: a module whose root holds no license file fails the
// generation instead of being left out silently.
func TestRenderRefusesModuleWithoutLicense(t *testing.T) {
	goroot, bare := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(goroot, "LICENSE"), []byte("BSD\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Render(&bytes.Buffer{}, goroot, []Module{{Path: "example.com/bare", Version: "v1.0.0", Dir: bare}})
	if err == nil || !strings.Contains(err.Error(), "example.com/bare@v1.0.0 has no license file") {
		t.Fatalf("err = %v, want the module named as having no license", err)
	}
}
