// Command kafkainit waits for the local Kafka brokers to answer a metadata request and creates
// the pipeline's topics from pkg/event, the one place their names and partition counts live.
// deploy/local/stack runs it; it is idempotent. On the cluster profile it creates the topics
// with -replication-factor 3 -min-insync-replicas 2 and refuses existing topics replicated
// otherwise; -describe prints each partition's leader, replicas and in-sync replicas.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/config"
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
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the brokers")
	probeOnly := fs.Bool("probe", false, "only probe readiness, create nothing")
	minBrokers := fs.Int("min-brokers", 1, "wait until the metadata lists at least this many brokers")
	var repl event.Replication
	fs.IntVar(&repl.Factor, "replication-factor", 1, "replicas of each partition of the topics created (0: the brokers' default)")
	fs.IntVar(&repl.MinInSync, "min-insync-replicas", 0, "min.insync.replicas of the topics created (0: the brokers' default)")
	describe := fs.Bool("describe", false, "create nothing; print each topic's partitions: leader, replicas, in-sync replicas")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs := strings.Split(*brokers, ",")
	// The same SASL and TLS settings as the services (SECKILL_KAFKA_*), so it runs against a
	// secured cluster as the admin principal.
	sec, err := config.LoadKafkaSecurity(os.Getenv)
	if err != nil {
		return err
	}
	admin, err := event.NewAdmin(addrs, event.AdminSecurity(sec))
	if err != nil {
		return err
	}
	if err := admin.WaitReady(ctx); err != nil {
		return err
	}
	if err := waitBrokers(ctx, addrs, *minBrokers, sec); err != nil {
		return err
	}
	if *probeOnly {
		return nil
	}
	topics := event.DefaultTopics(*prefix)
	// The grab topic's count is a setting of the services (SECKILL_GRAB_PARTITIONS); a topic
	// created with another count would make the reconciler refuse to start.
	if v := strings.TrimSpace(os.Getenv("SECKILL_GRAB_PARTITIONS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("SECKILL_GRAB_PARTITIONS=%q: want a positive integer", v)
		}
		topics.Grab.Partitions = n
	}
	if err := topics.Validate(); err != nil {
		return err
	}
	if *describe {
		states, err := admin.Describe(ctx, topics.All()...)
		if err != nil {
			return err
		}
		for _, t := range states {
			fmt.Println(t)
		}
		return nil
	}
	if err := admin.EnsureReplicatedTopics(ctx, repl, topics.All()...); err != nil {
		return err
	}
	if err := admin.CheckReplication(ctx, repl, topics.All()...); err != nil {
		return fmt.Errorf("%w (a topic created earlier keeps its settings: delete it, or the cluster's state, and run again)", err)
	}
	for _, t := range topics.All() {
		fmt.Printf("topic %s partitions=%d replication-factor=%d min.insync.replicas=%d\n", t.Name, t.Partitions, repl.Factor, repl.MinInSync)
	}
	return nil
}

// waitBrokers waits until the metadata lists at least n brokers: a replicated topic can be
// created only once that many have registered with the controller quorum.
func waitBrokers(ctx context.Context, addrs []string, n int, sec event.Security) error {
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 5 * time.Second}
	if t := sec.Transport(); t != nil {
		client.Transport = t
	}
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
		if err == nil && len(md.Brokers) >= n {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%d of %d brokers registered", len(md.Brokers), n)
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("kafka: waiting for %d brokers: %w", n, ctx.Err()), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
