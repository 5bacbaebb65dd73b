// Command inventory follows the inventory veil-exporter writes to NATS: the current object of
// every key, then every change as it is stored, with what changed and where it came from.
//
//	go run ./scripts/inventory -url nats://127.0.0.1:4222 -keys 'demo.domain.>'
//
// It reads the bucket's stream with an ordered consumer (a KV watch gives the values but not the
// Veil-* headers): the last message of each key first, then the new ones.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS server URL")
	bucket := flag.String("bucket", "VEIL_INVENTORY", "KV bucket")
	keys := flag.String("keys", ">", "keys to follow: <controller>.<class>.<id>, wildcards allowed")
	values := flag.Bool("values", false, "print each stored object, not only its key")
	flag.Parse()
	if err := run(*url, *bucket, *keys, *values); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

func run(url, bucket, keys string, values bool) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prefix := "$KV." + bucket + "."
	c, err := js.OrderedConsumer(ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + keys},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		key := strings.TrimPrefix(m.Subject(), prefix)
		change := h.Get("Veil-Change")
		if op := h.Get("KV-Operation"); op != "" && change == "" {
			change = strings.ToLower(op)
		}
		line := fmt.Sprintf("%s %s", key, change)
		if f := h.Get("Veil-Changed-Fields"); f != "" {
			line += " [" + f + "]"
		}
		if s := h.Get("Veil-Source"); s != "" {
			line += " (" + s + ")"
		}
		if values && len(m.Data()) > 0 {
			line += " " + string(m.Data())
		}
		fmt.Println(line)
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	<-ctx.Done()
	return nil
}
