package veil_test

// Answer bodies are read as they arrive: the length a server announces is a hint, never an
// allocation, and never trusted over what arrives.

import (
	"bufio"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/veil-exporter/veil-exporter/veil"
)

// rawServer answers every request on its own connection with head, then body, then closes
// (or, with hold, keeps the connection open until the test ends).
func rawServer(t *testing.T, head, body string, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				conn.Write([]byte(head + "\r\n" + body))
				if hold {
					<-done
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func rawClient(t *testing.T, url string) *veil.Client {
	t.Helper()
	c, err := veil.New(veil.Config{URL: url, Token: "t", MaxRetries: -1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A server that announces 60 MiB and sends a few bytes costs a few bytes: nothing is reserved
// from the announced length beyond a small first buffer.
func TestBodyAnnouncedLargerThanSent(t *testing.T) {
	url := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 62914560\r\nConnection: close\r\n",
		`{"id":"n1","verbose_name":"node`, false)
	c := rawClient(t, url)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 4 {
		if _, err := c.Node(context.Background(), "n1"); err == nil {
			t.Fatal("a body cut short decoded")
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Fatalf("4 short answers announcing 60 MiB allocated %d MiB", got>>20)
	}
}

// A server that sends more than it announced is read to the announced length: the answer is
// what was announced (here cut inside the object: an error, never a hang or a larger buffer).
func TestBodyLargerThanAnnounced(t *testing.T) {
	body := `{"id":"n1","verbose_name":"` + strings.Repeat("x", 1<<20) + `"}`
	url := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\nConnection: close\r\n", body, false)
	c := rawClient(t, url)
	_, err := c.Node(context.Background(), "n1")
	if err == nil || !strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("err = %v, want the 20 bytes announced, malformed", err)
	}
}

// An answer announced over MaxResponseBytes fails without waiting for its bytes: the server
// sends six of them and holds the connection, so a client that waited for the rest would end
// on its timeout instead of ErrTooLarge.
func TestBodyAnnouncedOverLimitIsNotRead(t *testing.T) {
	url := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n", `{"id":`, true)
	c := rawClient(t, url)
	_, err := c.Node(context.Background(), "n1")
	if !errors.Is(err, veil.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge (not the timeout of a client waiting for the announced body)", err)
	}
}

// An answer without a length (chunked) is read as it arrives up to MaxResponseBytes.
func TestBodyChunkedOverLimit(t *testing.T) {
	var b strings.Builder
	chunk := strings.Repeat("x", 4096)
	for range 64 {
		b.WriteString("1000\r\n" + chunk + "\r\n")
	}
	b.WriteString("0\r\n\r\n")
	url := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n", b.String(), false)
	c, err := veil.New(veil.Config{URL: url, Token: "t", MaxRetries: -1, MaxResponseBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Node(context.Background(), "n1"); !errors.Is(err, veil.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}
