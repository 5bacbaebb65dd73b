// Command subscribe prints the events veil-exporter forwards, as a JetStream subscriber sees them.
//
//	go run ./scripts/subscribe -url nats://127.0.0.1:4222 -subject 'veil.events.>'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS server URL")
	stream := flag.String("stream", "VEIL_EVENTS", "JetStream stream")
	subject := flag.String("subject", "veil.events.>", "subject filter")
	all := flag.Bool("all", false, "deliver the whole stream, not only new events")
	flag.Parse()
	if err := run(*url, *stream, *subject, *all); err != nil {
		fmt.Fprintln(os.Stderr, "subscribe:", err)
		os.Exit(1)
	}
}

func run(url, stream, subject string, all bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	policy := jetstream.DeliverNewPolicy
	if all {
		policy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: policy,
	})
	if err != nil {
		return fmt.Errorf("consumer on stream %s: %w", stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		fmt.Printf("%s  %s  %s\n", m.Subject(), m.Headers().Get("Nats-Msg-Id"), m.Data())
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	<-ctx.Done()
	return nil
}
