// Package release writes dist/ (make release): per architecture the tarball in promu's layout,
// the .deb and .rpm, the SBOM and the image, then the OCI archive of the images with their
// index, and sha256sums.txt (signed when a key is given). Every input of every artifact is the
// commit's (files, version, revision, time), so two runs for one commit give the same bytes.
package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Options says what to release and where.
type Options struct {
	Root      string    // the repository root (the daemon's module)
	Out       string    // dist/, emptied first
	Version   string    // VERSION, without a leading v
	Revision  string    // the commit
	Branch    string    // stamped as prometheus/common/version.Branch
	BuildUser string    // stamped as BuildUser
	Date      time.Time // the commit's time: build date and every mtime
	Arches    []string  // GOARCHes, linux only
	CABundle  string    // the image's CA bundle
	GPGKey    string    // a gpg key id to sign sha256sums.txt with; empty: no signature
	Log       io.Writer // progress, one line per artifact
}

// Run writes every artifact into o.Out.
func Run(ctx context.Context, o Options) error {
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "veil-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	dockerfile, err := os.ReadFile(filepath.Join(o.Root, "deploy", "Dockerfile"))
	if err != nil {
		return err
	}
	r, err := parseDockerfile(string(dockerfile))
	if err != nil {
		return err
	}
	unitSrc, err := os.ReadFile(filepath.Join(o.Root, "deploy", "systemd", "veil-exporter.service"))
	if err != nil {
		return err
	}
	unit, err := packagedUnit(string(unitSrc))
	if err != nil {
		return err
	}
	unitPath := filepath.Join(work, "veil-exporter.service")
	if err := os.WriteFile(unitPath, []byte(unit), 0o644); err != nil {
		return err
	}
	rel := &releaser{o: o, work: work, unitPath: unitPath, recipe: r}
	var manifests []descriptor
	for _, arch := range o.Arches {
		d, err := rel.arch(ctx, arch)
		if err != nil {
			return err
		}
		manifests = append(manifests, d)
	}
	archive, err := ociArchive(&rel.blobs, o, manifests)
	if err != nil {
		return err
	}
	if err := o.write(fmt.Sprintf("veil-exporter-%s.oci.tar", o.Version), archive); err != nil {
		return err
	}
	return Sums(ctx, o.Out, o.GPGKey)
}

// Sums writes dir/sha256sums.txt over the files of dir, and its signature by gpgKey if set.
func Sums(ctx context.Context, dir, gpgKey string) error {
	if err := writeSums(dir); err != nil {
		return err
	}
	if gpgKey != "" {
		return signSums(ctx, dir, gpgKey)
	}
	return nil
}

// releaser holds what every architecture's artifacts are made from, and the image blobs made.
type releaser struct {
	o        Options
	work     string // a scratch directory, one subdirectory per architecture
	unitPath string // the packaged unit
	recipe   recipe
	blobs    blobs
}

// arch writes the artifacts of linux/arch and adds its image to the blobs.
func (rel *releaser) arch(ctx context.Context, arch string) (descriptor, error) {
	o, work := rel.o, filepath.Join(rel.work, arch)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return descriptor{}, err
	}
	bin, err := buildBinary(ctx, o, arch, work)
	if err != nil {
		return descriptor{}, err
	}
	base := fmt.Sprintf("veil-exporter-%s.linux-%s", o.Version, arch)
	tgz, err := tarball(o.Root, base, bin, o.Date)
	if err != nil {
		return descriptor{}, err
	}
	if err := o.write(base+".tar.gz", tgz); err != nil {
		return descriptor{}, err
	}
	pkgs, err := writePackages(o, arch, bin, rel.unitPath)
	if err != nil {
		return descriptor{}, err
	}
	o.logf("wrote %v", pkgs)
	sbom, err := writeSBOM(o, bin)
	if err != nil {
		return descriptor{}, err
	}
	if err := o.write(base+".cdx.json", sbom); err != nil {
		return descriptor{}, err
	}
	context, err := imageContext(o.Root, bin, o.CABundle)
	if err != nil {
		return descriptor{}, err
	}
	return addImage(&rel.blobs, o, rel.recipe, arch, context)
}

// tarball is promu's layout: a folder named base holding the binary, LICENSE, NOTICE, the
// example config and the systemd units.
func tarball(root, base, bin string, mtime time.Time) ([]byte, error) {
	entries := []entry{{Name: base + "/", Mode: 0o755}}
	files := []struct {
		name, src string
		mode      int64
	}{
		{"veil-exporter", bin, 0o755},
		{"LICENSE", "LICENSE", 0o644},
		{"NOTICE", "NOTICE", 0o644},
		{"config.example.yaml", "config.example.yaml", 0o644},
		{"systemd/", "", 0o755},
		{"systemd/veil-exporter.service", "deploy/systemd/veil-exporter.service", 0o644},
		{"systemd/veil-exporter.socket", "deploy/systemd/veil-exporter.socket", 0o644},
		{"systemd/veil-exporter-ha.conf", "deploy/systemd/veil-exporter-ha.conf", 0o644},
	}
	for _, f := range files {
		if f.src == "" {
			entries = append(entries, entry{Name: base + "/" + f.name, Mode: f.mode})
			continue
		}
		src := f.src
		if !filepath.IsAbs(src) {
			src = filepath.Join(root, src)
		}
		e, err := fileEntry(base+"/"+f.name, src, f.mode)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return tarGz(entries, mtime)
}

func (o Options) write(name string, data []byte) error {
	o.logf("wrote %s (%d bytes)", name, len(data))
	return os.WriteFile(filepath.Join(o.Out, name), data, 0o644)
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "release: "+format+"\n", args...)
	}
}
