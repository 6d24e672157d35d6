// Command kafkainit waits for the local Kafka broker to answer a metadata request and creates
// the pipeline's topics from pkg/event, the one place their names and partition counts live.
// deploy/local/stack runs it; it is idempotent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kafkainit:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kafkainit", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "comma-separated bootstrap brokers")
	prefix := fs.String("prefix", os.Getenv("SECKILL_TOPIC_PREFIX"), "topic name prefix")
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the broker")
	probeOnly := fs.Bool("probe", false, "only probe readiness, create nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	admin, err := event.NewAdmin(strings.Split(*brokers, ","))
	if err != nil {
		return err
	}
	if err := admin.WaitReady(ctx); err != nil {
		return err
	}
	if *probeOnly {
		return nil
	}
	topics := event.DefaultTopics(*prefix)
	if err := topics.Validate(); err != nil {
		return err
	}
	if err := admin.EnsureTopics(ctx, topics.All()...); err != nil {
		return err
	}
	for _, t := range topics.All() {
		fmt.Printf("topic %s partitions=%d\n", t.Name, t.Partitions)
	}
	return nil
}
