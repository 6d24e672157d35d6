// Command reconciler keeps Redis and MySQL honest: it corrects stock drift, re-publishes
// stale reservations, replays the compensation topic and runs the session lifecycle, on a
// schedule or once (--once).
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
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.LoadReconciler(getenv)
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
	if err := stock.CheckPolicy(ctx, rdb); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	ops.Register(mux, reg, map[string]ops.Check{
		"mysql": func(ctx context.Context) error { return store.Ping(ctx, db) },
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	})

	log.Info("reconciler starting", "http_addr", cfg.HTTPAddr, "interval", cfg.Interval.String(),
		"preheat_lead", cfg.PreheatLead.String())
	err = ops.Serve(ctx, ops.NewServer(cfg.HTTPAddr, mux), cfg.ShutdownTimeout)
	log.Info("reconciler stopped", "error", fmt.Sprint(err))
	return err
}
