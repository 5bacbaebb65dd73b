// The OCI image of one architecture, assembled from deploy/Dockerfile's recipe without a
// container build: one layer (the COPY steps over the build context make image makes), the
// image config (user, ports, volumes, entrypoint, labels) and the manifest, all as blobs of an
// OCI layout; ociArchive then writes the layout with an index of every architecture.
package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// blobs holds content by digest, in the order added.
type blobs struct {
	order []string
	data  map[string][]byte
}

func (b *blobs) add(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if b.data == nil {
		b.data = map[string][]byte{}
	}
	if _, ok := b.data[d]; !ok {
		b.order = append(b.order, d)
		b.data[d] = data
	}
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

// imageContext is the build context of make image: name -> content (nil for the state dir).
func imageContext(root, bin, caBundle string) (map[string][]byte, error) {
	ctx := map[string][]byte{
		"passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		"group":  []byte("root:x:0:\nnonroot:x:65532:\n"),
		"state":  nil,
	}
	for name, src := range map[string]string{"veil-exporter": bin, "ca-certificates.crt": caBundle, "config.yaml": path.Join(root, "config.example.yaml")} {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("image context %s: %w", name, err)
		}
		ctx[name] = b
	}
	return ctx, nil
}

// layerEntries applies the recipe's COPY steps to the context: parents as root 0755
// directories, sorted by path.
func layerEntries(r recipe, context map[string][]byte) ([]entry, error) {
	byName := map[string]entry{}
	addDir := func(dir string, uid, gid int) {
		byName[dir+"/"] = entry{Name: dir + "/", Mode: 0o755, UID: uid, GID: gid}
	}
	for _, c := range r.Copies {
		uid, gid, err := chown(c.Chown)
		if err != nil {
			return nil, err
		}
		for _, src := range c.Sources {
			data, ok := context[src]
			if !ok {
				return nil, fmt.Errorf("COPY %s: not in the build context", src)
			}
			dst := strings.Trim(c.Dst, "/")
			switch {
			case data == nil: // a directory: its (empty) contents into dst
				addDir(dst, uid, gid)
			case strings.HasSuffix(c.Dst, "/"):
				dst += "/" + src
				fallthrough
			default:
				mode := int64(0o644)
				if src == "veil-exporter" {
					mode = 0o755
				}
				byName[dst] = entry{Name: dst, Mode: mode, UID: uid, GID: gid, Data: data}
			}
			for d := path.Dir(strings.TrimSuffix(dst, "/")); d != "."; d = path.Dir(d) {
				if _, ok := byName[d+"/"]; !ok {
					addDir(d, 0, 0)
				}
			}
		}
	}
	out := make([]entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func chown(s string) (int, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	u, g, _ := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("COPY --chown=%s: only numeric uid:gid is supported", s)
	}
	return uid, gid, nil
}

// imageLabels are the OCI annotations every image carries, over the Dockerfile's own labels.
func imageLabels(o Options, r recipe) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "veil-exporter",
		"org.opencontainers.image.description": "Prometheus exporter and NATS event forwarder for ECP VeiL controllers",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Date.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      homepage,
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	for k, v := range r.Labels {
		l[k] = v
	}
	return l
}

// addImage puts one architecture's layer, config and manifest into bs and returns the
// manifest's descriptor with its platform.
func addImage(bs *blobs, o Options, r recipe, arch string, context map[string][]byte) (descriptor, error) {
	entries, err := layerEntries(r, context)
	if err != nil {
		return descriptor{}, err
	}
	var tarball bytes.Buffer
	if err := writeTar(&tarball, entries, o.Date); err != nil {
		return descriptor{}, err
	}
	diff := sha256.Sum256(tarball.Bytes())
	gz, err := tarGz(entries, o.Date)
	if err != nil {
		return descriptor{}, err
	}
	layer := bs.add(mediaLayer, gz)
	plat := &platform{Architecture: arch, OS: "linux"}
	if arch == "arm64" {
		plat.Variant = "v8"
	}
	set := func(list []string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, v := range list {
			m[v] = struct{}{}
		}
		return m
	}
	created := o.Date.UTC().Format(time.RFC3339)
	config := map[string]any{
		"created": created, "architecture": plat.Architecture, "os": plat.OS, "variant": plat.Variant,
		"config": map[string]any{
			"User": r.User, "ExposedPorts": set(r.Exposed), "Volumes": set(r.Volumes),
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Entrypoint": r.Entrypoint, "Cmd": r.Cmd, "Labels": imageLabels(o, r),
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
		"history": []map[string]string{{"created": created, "created_by": "veil-exporter release: deploy/Dockerfile assembled without a build"}},
	}
	if plat.Variant == "" {
		delete(config, "variant")
	}
	cfgJSON, err := json.Marshal(config)
	if err != nil {
		return descriptor{}, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaManifest,
		"config": bs.add(mediaConfig, cfgJSON), "layers": []descriptor{layer},
		"annotations": imageLabels(o, r),
	})
	if err != nil {
		return descriptor{}, err
	}
	d := bs.add(mediaManifest, manifest)
	d.Platform = plat
	return d, nil
}

// ociArchive writes the OCI layout as a tar: the blobs, an image index of the manifests, and
// index.json naming that index by the version.
func ociArchive(bs *blobs, o Options, manifests []descriptor) ([]byte, error) {
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": manifests})
	if err != nil {
		return nil, err
	}
	id := bs.add(mediaIndex, index)
	id.Annotations = map[string]string{"org.opencontainers.image.ref.name": "veil-exporter:" + o.Version}
	top, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": []descriptor{id}})
	if err != nil {
		return nil, err
	}
	entries := []entry{
		{Name: "oci-layout", Mode: 0o644, Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{Name: "index.json", Mode: 0o644, Data: top},
		{Name: "blobs/", Mode: 0o755},
		{Name: "blobs/sha256/", Mode: 0o755},
	}
	for _, d := range bs.order {
		entries = append(entries, entry{Name: "blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), Mode: 0o644, Data: bs.data[d]})
	}
	var b bytes.Buffer
	if err := writeTar(&b, entries, o.Date); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
