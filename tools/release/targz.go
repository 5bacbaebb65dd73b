// Deterministic tarballs: every header field fixed (owner, mode, time, format), entries in the
// order given, gzip without a name or timestamp, so the same files give the same bytes.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// entry is one member of a tarball: a directory (Dir), or a file with its content.
type entry struct {
	Name     string // slash-separated, no leading slash; directories end in "/"
	Mode     int64
	UID, GID int
	Data     []byte
}

// fileEntry reads src into an entry named name with mode.
func fileEntry(name, src string, mode int64) (entry, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return entry{}, err
	}
	return entry{Name: name, Mode: mode, Data: b}, nil
}

// writeTar writes entries as a USTAR/PAX stream with mtime for every member.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.Name,
			Mode:    e.Mode,
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: mtime.UTC().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.Name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar %s: %w", e.Name, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// tarGz is writeTar compressed with gzip (best compression, no name, no timestamp).
func tarGz(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if err := writeTar(zw, entries, mtime); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
