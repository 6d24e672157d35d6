// Command consumer turns grab events from Kafka into orders in MySQL: one worker per
// partition, batched per prize, optimistic locking, tiered retries, compensation and dead
// letters, and order events for downstream systems.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/seckill-pipeline/seckill/pkg/buildinfo"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/memlimit"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

func main() {
	if buildinfo.PrintVersion(os.Args[1:], "consumer", os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := start(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.LoadConsumer(getenv)
	if err != nil {
		return err
	}
	// Lines logged with a context inside a span carry its trace_id and span_id.
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel})))

	// Before anything allocates much: the soft limit makes the collector work harder as the
	// heap nears the container's limit, instead of the kernel killing the process.
	soft, err := memlimit.Apply(cfg.MemLimit)
	if err != nil {
		return err
	}
	log.LogAttrs(ctx, slog.LevelInfo, "memory limit", soft.Attrs()...)

	// Off unless an OTLP endpoint is set (OTEL_*); a setting it does not support stops the
	// consumer here, named.
	tr, flushSpans, err := tracing.ForService(ctx, "consumer", cfg.Tracing.Get, log, cfg.ShutdownTimeout)
	if err != nil {
		return err
	}
	// Runs last, after the relay stopped: the spans of the last batches and their events are
	// flushed before the process ends.
	defer flushSpans()

	db, err := store.Connect(ctx, cfg.MySQL())
	if err != nil {
		return err
	}
	defer store.Close(db)
	rdb, err := stock.Dial(ctx, cfg.Redis())
	if err != nil {
		return err
	}
	defer rdb.Close()
	// The consumer settles outcomes in the same keys the gateway admits with: an evicting
	// Redis is as wrong here as there.
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		return err
	}
	kafkaAdmin, err := event.NewAdmin(cfg.KafkaBrokers, event.AdminSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	// A missing ACL or a refused login stops the consumer here, named, not at the first batch.
	if err := kafkaAdmin.CheckAccess(ctx,
		event.Need{Op: event.OpRead, Topic: cfg.Topics.Grab.Name}, event.Need{Op: event.OpRead, Group: cfg.GroupID},
		event.Need{Op: event.OpRead, Topic: cfg.Topics.Feedback.Name}, event.Need{Op: event.OpRead, Group: cfg.FeedbackGroup},
		event.Need{Op: event.OpWrite, Topic: cfg.Topics.Order.Name}, event.Need{Op: event.OpWrite, Topic: cfg.Topics.Compensation.Name},
		event.Need{Op: event.OpWrite, Topic: cfg.Topics.DeadLetter.Name}); err != nil {
		return err
	}
	// NewWriter enforces acks=all and the murmur2 balancer on every writer it builds.
	compensation, err := event.NewWriter(cfg.KafkaBrokers, cfg.Topics.Compensation.Name, event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer compensation.Close()
	deadLetterWriter, err := event.NewDeadLetterWriter(cfg.KafkaBrokers, cfg.Topics.DeadLetter, event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer deadLetterWriter.Close()
	// The order topic is keyed by request id: all events of one order on one partition.
	// kafka-go has no idempotent producer, so a write that times out may still land later
	// (the broker was only paused) and a retry of it would land twice. The relay's writer
	// therefore never retries by itself and waits long for an answer: a broker pause ends in
	// one late acknowledgement, and only a real outage reaches the relay's recovery scan.
	orders, err := event.NewWriter(cfg.KafkaBrokers, cfg.Topics.Order.Name,
		event.WithBatchSize(1000), event.WithSingleAttempt(30*time.Second), event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer orders.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildinfo.Register(reg, "consumer")
	m := newMetrics(reg)
	dlWriter, err := event.NewDeadLetters(deadLetterWriter, m.deadLetters, cfg.Topics.DeadLetter.MaxMessageBytes)
	if err != nil {
		return err
	}
	// Every dead letter is also an exception case on the workbench, where a person can
	// replay it once its cause is fixed.
	deadLetters := exception.NewDeadLetters(dlWriter, store.NewExceptions(db), time.Now, log)
	mux := http.NewServeMux()
	ops.Register(mux, reg, map[string]ops.Check{
		"mysql": func(ctx context.Context) error { return store.Ping(ctx, db) },
		"kafka": kafkaAdmin.Ping,
	})

	relay := &outboxRelay{
		outbox: store.NewOutbox(db), writer: orders, offsets: kafkaAdmin, brokers: cfg.KafkaBrokers, dialer: cfg.Kafka.Dialer(),
		topic: cfg.Topics.Order.Name, lock: mysqlRelayLock{db: db, name: store.RelayLockName(cfg.MySQLDSN, cfg.Topics.Order.Name)},
		batch: 1000, idle: 50 * time.Millisecond, wake: make(chan struct{}, 1), metrics: m, log: log, now: time.Now, tr: tr,
	}
	proc := &processor{
		write:        writepath.New(store.NewOrders(db), gate, retry.Default(), m, log, time.Now).WithTracing(tr),
		compensation: compensation, deadLetters: deadLetters,
		metrics: m, log: log, onPersisted: relay.Kick,
	}
	events := &batchEvents{
		progress: store.NewEventProgress(db), outbox: store.NewOutbox(db),
		locks: mysqlPartitionLock{db: db, name: func(p int) string {
			return store.ProgressLockName(cfg.MySQLDSN, cfg.Topics.Grab.Name, p)
		}},
		writer: orders, offsets: kafkaAdmin, brokers: cfg.KafkaBrokers, dialer: cfg.Kafka.Dialer(),
		topic: cfg.Topics.Order.Name, metrics: m, log: log, now: time.Now,
		rescanEvery: 30 * time.Second, retryEvery: time.Second, tr: tr,
	}
	group := &groupConsumer{
		brokers: cfg.KafkaBrokers, dialer: cfg.Kafka.Dialer(), groupID: cfg.GroupID, topic: cfg.Topics.Grab.Name,
		batchSize: cfg.BatchSize, batchWait: cfg.BatchWait, readAhead: int64(cfg.ReadAhead), proc: proc, events: events, log: log,
	}
	// Downstream's order feedback (paid, cancelled): its own group, the same care.
	feedback := &groupConsumer{
		brokers: cfg.KafkaBrokers, dialer: cfg.Kafka.Dialer(), groupID: cfg.FeedbackGroup, topic: cfg.Topics.Feedback.Name,
		batchSize: cfg.BatchSize, batchWait: cfg.BatchWait, readAhead: int64(cfg.ReadAhead), log: log,
		proc: &feedbackProcessor{orders: store.NewOrders(db), gate: gate, returns: store.NewReturns(db),
			deadLetters: deadLetters, policy: retry.Default(), metrics: newFeedbackMetrics(reg), log: log,
			now: time.Now, onApplied: relay.Kick, tr: tr},
	}
	gauges := &sampler{lag: kafkaAdmin, group: cfg.GroupID, topic: cfg.Topics.Grab, outbox: store.NewOutbox(db),
		every: 5 * time.Second, metrics: m, log: log}

	log.Info("consumer starting", "http_addr", cfg.HTTPAddr, "group_id", cfg.GroupID,
		"grab_topic", cfg.Topics.Grab.Name, "order_topic", cfg.Topics.Order.Name,
		"compensation_topic", cfg.Topics.Compensation.Name, "dead_letter_topic", cfg.Topics.DeadLetter.Name,
		"feedback_topic", cfg.Topics.Feedback.Name, "feedback_group", cfg.FeedbackGroup,
		"batch_size", cfg.BatchSize, "batch_wait", cfg.BatchWait.String(), "read_ahead_bytes", cfg.ReadAhead, "kafka_acks", "all",
		"redis_addr", cfg.RedisAddr, "redis_user", cfg.RedisUsername, "redis_tls", cfg.RedisTLS != nil,
		"kafka_brokers", cfg.KafkaBrokers, "kafka_security", cfg.Kafka.String(), "mysql_tls", cfg.MySQLTLS != nil)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ops.Serve(gctx, ops.NewServer(cfg.HTTPAddr, mux), cfg.ShutdownTimeout) })
	g.Go(func() error { return group.Run(gctx) })
	g.Go(func() error { return feedback.Run(gctx) })
	g.Go(func() error { return gauges.Run(gctx) })
	// The relay outlives the group by a moment so the last batches' events go out.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	err = g.Wait()
	relay.Kick()
	select {
	case <-time.After(500 * time.Millisecond):
	case <-relayDone:
	}
	stopRelay()
	<-relayDone
	log.Info("consumer stopped", "error", fmt.Sprint(err))
	return err
}
