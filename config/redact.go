package config

import "strings"

// RedactURL masks whatever could be credentials in a URL or a comma-separated URL list (as
// nats.url takes) before it is shown anywhere: the status page and its JSON, logs, errors and
// --config.check. In each URL, everything between "scheme://" (or the start) and the last '@'
// before the next "://" becomes "xxxxx"; the rest stays byte for byte.
//
// It works on the raw text rather than url.Parse: a list parses as one URL with the later
// URLs in its path (url.URL.Redacted then keeps their passwords), a URL that url.Parse rejects
// may still carry a password, and an unescaped '@', '/', '#' or ',' in a password moves the
// boundaries url.Parse sees. Masking too much is harmless; showing a password is not.
func RedactURL(raw string) string {
	// Cut the text at every "://": each piece is the authority-and-rest of one URL (and the
	// next URL's scheme); the piece before the first "://" is a scheme or a scheme-less URL.
	var b strings.Builder
	b.Grow(len(raw))
	start := 0
	for {
		end := len(raw)
		sep := strings.Index(raw[start:], "://")
		if sep >= 0 {
			end = start + sep
		}
		piece := raw[start:end]
		if at := strings.LastIndexByte(piece, '@'); at >= 0 {
			b.WriteString("xxxxx")
			piece = piece[at:]
		}
		b.WriteString(piece)
		if sep < 0 {
			return b.String()
		}
		b.WriteString("://")
		start = end + 3
	}
}
