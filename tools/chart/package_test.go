// This file checks Package: the archive is the same bytes on every run, and Helm loads it as
// the chart it was made from.

package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
)

func TestPackageIsReproducibleAndLoads(t *testing.T) {
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	first, err := Package(chartDir, t.TempDir(), mtime)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Package(chartDir, t.TempDir(), mtime)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("two packagings differ (%d and %d bytes)", len(a), len(b))
	}
	src := loadChart(t)
	if want := src.Name() + "-" + src.Metadata.Version + ".tgz"; filepath.Base(first) != want {
		t.Errorf("archive %s, want %s", filepath.Base(first), want)
	}
	got, err := loader.LoadFile(first)
	if err != nil {
		t.Fatalf("helm cannot load the archive: %v", err)
	}
	if len(got.Templates) != len(src.Templates) || len(got.Files) != len(src.Files) ||
		!bytes.Equal(got.Schema, src.Schema) || got.Metadata.AppVersion != src.Metadata.AppVersion {
		t.Errorf("the archive holds %d templates, %d files, a schema of %d bytes; the chart %d, %d, %d",
			len(got.Templates), len(got.Files), len(got.Schema), len(src.Templates), len(src.Files), len(src.Schema))
	}
	later, err := Package(chartDir, t.TempDir(), mtime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(later); bytes.Equal(a, c) {
		t.Error("the archive does not carry the time it is given")
	}
}
