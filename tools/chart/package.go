// This file writes the chart's archive the way `helm package` does, but reproducibly: Helm's
// own writer stamps every entry with the time of the run.

package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Package loads the chart in chartDir, archives it with Helm's chartutil.Save and rewrites the
// archive with every entry's time set to mtime, owner root and mode 0644, and no time or name
// in the gzip header: two runs on the same sources give the same bytes. It returns the path of
// <outDir>/<name>-<version>.tgz.
func Package(chartDir, outDir string, mtime time.Time) (string, error) {
	c, err := loader.LoadDir(chartDir)
	if err != nil {
		return "", fmt.Errorf("loading the chart: %w", err)
	}
	tmp, err := os.MkdirTemp("", "veil-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	saved, err := chartutil.Save(c, tmp)
	if err != nil {
		return "", fmt.Errorf("archiving the chart: %w", err)
	}
	in, err := os.ReadFile(saved)
	if err != nil {
		return "", err
	}
	out, err := normalize(in, mtime)
	if err != nil {
		return "", fmt.Errorf("rewriting %s: %w", filepath.Base(saved), err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	dest := filepath.Join(outDir, filepath.Base(saved))
	if err := os.WriteFile(dest, out, 0o644); err != nil {
		return "", err
	}
	return dest, nil
}

// normalize copies a gzipped tar entry by entry, in the same order, keeping names and contents
// and Helm's gzip header extra and comment, and fixing everything that varies between runs.
func normalize(archive []byte, mtime time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Extra = zr.Extra
	zw.Comment = zr.Comment
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		err = tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     h.Name,
			Mode:     0o644,
			Size:     int64(len(body)),
			ModTime:  mtime.UTC().Truncate(time.Second),
		})
		if err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
