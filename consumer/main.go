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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.LoadConsumer(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))

	db, err := store.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close(db)
	rdb, err := stock.Connect(ctx, cfg.RedisAddr, cfg.RedisPassword)
	if err != nil {
		return err
	}
	defer rdb.Close()
	kafkaAdmin, err := event.NewAdmin(cfg.KafkaBrokers)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	ops.Register(mux, reg, map[string]ops.Check{
		"mysql": func(ctx context.Context) error { return store.Ping(ctx, db) },
		"kafka": kafkaAdmin.Ping,
	})

	log.Info("consumer starting", "http_addr", cfg.HTTPAddr, "group_id", cfg.GroupID,
		"grab_topic", cfg.Topics.Grab.Name, "batch_size", cfg.BatchSize,
		"batch_wait", cfg.BatchWait.String())
	err = ops.Serve(ctx, ops.NewServer(cfg.HTTPAddr, mux), cfg.ShutdownTimeout)
	log.Info("consumer stopped", "error", fmt.Sprint(err))
	return err
}
