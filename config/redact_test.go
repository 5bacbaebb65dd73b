package config

import (
	"strings"
	"testing"
)

// TestRedactURL: no password survives, whatever the URL or list looks like, and what is not
// credentials (schemes, hosts, ports, paths) stays as written so a person can tell servers apart.
func TestRedactURL(t *testing.T) {
	const pw = "s3cret"
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"no userinfo", "https://veil.example.com/api", "https://veil.example.com/api"},
		{"user and password", "https://admin:" + pw + "@veil.example.com", "https://xxxxx@veil.example.com"},
		{"user only", "nats://token" + pw + "@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"list, password in the second", "nats://127.0.0.1:4222,nats://user:" + pw + "@127.0.0.1:4223", "nats://127.0.0.1:4222,nats://xxxxx@127.0.0.1:4223"},
		{"list, password in the first", "nats://user:" + pw + "@a:4222,nats://b:4222", "nats://xxxxx@a:4222,nats://b:4222"},
		{"list, passwords in both, spaces", "nats://u:" + pw + "@a:4222, tls://v:" + pw + "@b:4222", "nats://xxxxx@a:4222, tls://xxxxx@b:4222"},
		{"list, scheme-less entry", "nats://a:4222,user:" + pw + "@b:4222", "nats://xxxxx@b:4222"},
		{"IPv6 host", "nats://user:" + pw + "@[::1]:4222", "nats://xxxxx@[::1]:4222"},
		{"IPv6 host, no userinfo", "nats://[fe80::1%25eth0]:4222", "nats://[fe80::1%25eth0]:4222"},
		{"IPv6 list", "nats://[::1]:4222,nats://u:" + pw + "@[2001:db8::2]:4223", "nats://[::1]:4222,nats://xxxxx@[2001:db8::2]:4223"},
		{"escaped characters", "nats://us%40er:" + pw + "%2F%40x@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"unescaped at sign in password", "nats://user:" + pw[:3] + "@" + pw[3:] + "@host:4222", "nats://xxxxx@host:4222"},
		{"unescaped slash and hash", "https://user:" + pw[:2] + "/#" + pw[2:] + "@host/api", "https://xxxxx@host/api"},
		{"unescaped comma in password", "https://user:" + pw[:3] + "," + pw[3:] + "@host", "https://xxxxx@host"},
		{"url.Parse rejects it", "https://admin:" + pw + "%zz@veil.example.com", "https://xxxxx@veil.example.com"},
		{"no scheme", "admin:" + pw + "@veil.example.com", "xxxxx@veil.example.com"},
		{"no host", "nats://user:" + pw + "@", "nats://xxxxx@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RedactURL(tt.in)
			if got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for _, leak := range []string{pw, pw[:3], pw[3:]} {
				if strings.Contains(got, leak) {
					t.Errorf("RedactURL(%q) = %q shows %q", tt.in, got, leak)
				}
			}
		})
	}
}

// TestNATSURLListValidation: each server of a list is checked, and a bad list is quoted redacted.
func TestNATSURLListValidation(t *testing.T) {
	ok := "nats://127.0.0.1:4222, nats://user:pw@127.0.0.1:4223"
	if _, err := Parse([]byte("controllers:\n  - {name: a, url: 'https://x', token: t}\nnats: {url: '" + ok + "'}\n")); err != nil {
		t.Fatalf("list %q refused: %v", ok, err)
	}
	bad := "nats://127.0.0.1:4222,http://user:s3cret@127.0.0.1:4223"
	_, err := Parse([]byte("controllers:\n  - {name: a, url: 'https://x', token: t}\nnats: {url: '" + bad + "'}\n"))
	if err == nil {
		t.Fatalf("list %q accepted", bad)
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "http://xxxxx@127.0.0.1:4223") {
		t.Errorf("error = %v", err)
	}
}
