// The .deb and .rpm packages, made with nfpm as a library: the binary, the packaged unit and the
// socket, the config files kept on upgrade, the state directory of the system user the package
// scripts make, and the operations kit (rules, dashboards, stream definitions) under
// /usr/share/veil-exporter. Every time in them is the commit's.
package release

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
)

const (
	maintainer  = "veil-exporter maintainers <veil-exporter@users.noreply.github.com>"
	homepage    = "https://github.com/veil-exporter/veil-exporter"
	description = "Prometheus exporter and NATS event forwarder for ECP VeiL controllers\n" +
		"veil-exporter exports the inventory of ECP VeiL (and SpaceVM) virtualization controllers\n" +
		"(nodes, clusters, datapools, VMs, tasks) and guest-agent checks as Prometheus metrics,\n" +
		"and forwards the controller's event journal to NATS JetStream, each event once."
)

// pkgFile is one file of a package: its source, where it goes, its type and mode.
type pkgFile struct {
	src, dst, typ string
	mode          os.FileMode
	owner         string
}

// packageFiles lists the package's contents: bin is the binary, unit the packaged unit file.
func packageFiles(root, bin, unit string) ([]pkgFile, error) {
	pk := filepath.Join(root, "tools", "release", "packaging")
	out := []pkgFile{
		{src: bin, dst: "/usr/bin/veil-exporter", mode: 0o755},
		{src: unit, dst: "/usr/lib/systemd/system/veil-exporter.service", mode: 0o644},
		{src: filepath.Join(root, "deploy/systemd/veil-exporter.socket"), dst: "/usr/lib/systemd/system/veil-exporter.socket", mode: 0o644},
		{src: filepath.Join(root, "config.example.yaml"), dst: "/etc/veil-exporter/config.yaml", typ: files.TypeConfigNoReplace, mode: 0o640},
		{src: filepath.Join(pk, "default"), dst: "/etc/default/veil-exporter", typ: files.TypeConfigNoReplace, mode: 0o644},
		{dst: "/etc/veil-exporter", typ: files.TypeDir, mode: 0o750},
		{dst: "/var/lib/veil-exporter", typ: files.TypeDir, mode: 0o700, owner: "veil-exporter"},
		{src: filepath.Join(root, "deploy/prometheus/veil-exporter.rules.yml"), dst: "/usr/share/veil-exporter/rules/veil-exporter.rules.yml", mode: 0o644},
		{src: filepath.Join(root, "LICENSE"), dst: "/usr/share/doc/veil-exporter/LICENSE", mode: 0o644},
		{src: filepath.Join(root, "NOTICE"), dst: "/usr/share/doc/veil-exporter/NOTICE", mode: 0o644},
		{src: filepath.Join(root, "CHANGELOG.md"), dst: "/usr/share/doc/veil-exporter/CHANGELOG.md", mode: 0o644},
	}
	for dir, pattern := range map[string]string{"dashboards": "dashboards/*.json", "nats": "deploy/nats/*.json"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil || len(matches) == 0 {
			return nil, fmt.Errorf("no %s in %s (%v)", pattern, root, err)
		}
		sort.Strings(matches)
		for _, m := range matches {
			out = append(out, pkgFile{src: m, dst: "/usr/share/veil-exporter/" + dir + "/" + filepath.Base(m), mode: 0o644})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dst < out[j].dst })
	return out, nil
}

// packageInfo is nfpm's description of the package for linux/arch.
func packageInfo(o Options, arch string, contents []pkgFile) *nfpm.Info {
	pk := filepath.Join(o.Root, "tools", "release", "packaging")
	var cs files.Contents
	for _, f := range contents {
		owner := f.owner
		if owner == "" {
			owner = "root"
		}
		cs = append(cs, &files.Content{Source: f.src, Destination: f.dst, Type: f.typ,
			FileInfo: &files.ContentFileInfo{Owner: owner, Group: owner, Mode: f.mode, MTime: o.Date}})
	}
	info := &nfpm.Info{
		Name: "veil-exporter", Arch: arch, Platform: "linux", Version: o.Version, Release: "1",
		Section: "net", Priority: "optional", Maintainer: maintainer, Description: description,
		Vendor: "veil-exporter", Homepage: homepage, License: "Apache-2.0", MTime: o.Date,
		Overridables: nfpm.Overridables{
			Contents: cs,
			Umask:    0o022,
			Suggests: []string{"prometheus", "nats-server"},
			Scripts: nfpm.Scripts{
				PreInstall:  filepath.Join(pk, "preinstall.sh"),
				PostInstall: filepath.Join(pk, "postinstall.sh"),
				PreRemove:   filepath.Join(pk, "preremove.sh"),
				PostRemove:  filepath.Join(pk, "postremove.sh"),
			},
			RPM: nfpm.RPM{BuildHost: "veil-exporter-release", Group: "System Environment/Daemons",
				Summary: "Prometheus exporter and NATS event forwarder for ECP VeiL controllers"},
		},
	}
	return nfpm.WithDefaults(info)
}

// writePackages writes the .deb and the .rpm for linux/arch into o.Out and returns their names.
func writePackages(o Options, arch, bin, unit string) ([]string, error) {
	contents, err := packageFiles(o.Root, bin, unit)
	if err != nil {
		return nil, err
	}
	var names []string
	for format, p := range map[string]nfpm.Packager{"deb": deb.Default, "rpm": rpm.DefaultRPM} {
		info := packageInfo(o, arch, contents)
		switch format {
		case "deb":
			info.Release = "" // veil-exporter_<v>_<arch>.deb: the version is upstream's alone
		case "rpm":
			// What the scripts run, as files: every rpm distribution resolves these, whichever
			// package (shadow-utils, shadow) provides them; Debian's are essential.
			info.Depends = []string{"/bin/sh", "/usr/sbin/groupadd", "/usr/sbin/useradd"}
		}
		if err := nfpm.PrepareForPackager(info, format); err != nil {
			return nil, fmt.Errorf("%s: %w", format, err)
		}
		name := p.ConventionalFileName(info)
		f, err := os.Create(filepath.Join(o.Out, name))
		if err != nil {
			return nil, err
		}
		err = p.Package(info, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", format, arch, err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}
