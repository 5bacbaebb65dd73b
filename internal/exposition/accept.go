package exposition

// parseAcceptEncoding reads Accept-Encoding values ("gzip;q=0.5, zstd") as promhttp's
// vendored negotiation does: tokens lower-cased as sent, q defaulting to 1.

import (
	"strconv"
	"strings"
)

type encodingSpec struct {
	value string
	q     float64
}

func parseAcceptEncoding(values []string) []encodingSpec {
	var specs []encodingSpec
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			fields := strings.Split(part, ";")
			name := strings.TrimSpace(fields[0])
			if name == "" {
				continue
			}
			spec := encodingSpec{value: name, q: 1}
			for _, p := range fields[1:] {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || strings.TrimSpace(k) != "q" {
					continue
				}
				q, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || q < 0 || q > 1 {
					spec.q = -2 // an unreadable q: never chosen
					continue
				}
				spec.q = q
			}
			specs = append(specs, spec)
		}
	}
	return specs
}
