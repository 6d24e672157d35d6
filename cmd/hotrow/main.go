// Command hotrow measures how fast orders go into one hot stock row: the consumer's batched
// transaction (one conditional UPDATE and one multi-row INSERT per batch) against one
// transaction per order. It creates its own database on the local MariaDB and drops it.
// It prints numbers; it asserts nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hotrow:", err)
		os.Exit(1)
	}
}

// Result is one mode's measurement.
type Result struct {
	Mode      string  `json:"mode"`
	Orders    int     `json:"orders"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"orders_per_s"`
	Conflicts int64   `json:"conflicts"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("hotrow", flag.ContinueOnError)
	orders := fs.Int("orders", 20000, "orders per mode")
	perOrder := fs.Int("per-order", 0, "orders in the one-tx-per-order mode (0: -orders); it is ~25× slower, so the bench gives it fewer")
	batch := fs.Int("batch", 200, "grabs per transaction in batched mode")
	workers := fs.Int("workers", 1, "concurrent writers in per-order mode (1 = one writer per prize, as the consumer)")
	asJSON := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the batched mode to this file")
	skipPerOrder := fs.Bool("batched-only", false, "measure the batched mode only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *orders < 1 || *batch < 1 || *workers < 1 || *perOrder < 0 {
		return errors.New("-orders, -batch and -workers must be ≥ 1, -per-order ≥ 0")
	}
	if *perOrder == 0 {
		*perOrder = *orders
	}
	dsn := getenv("SECKILL_MYSQL_DSN")
	if dsn == "" {
		dsn = config.DefaultMySQLDSN
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	base, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close(base)
	cfg.DBName = fmt.Sprintf("seckill_hotrow_%d", time.Now().UnixNano())
	if err := base.Exec("CREATE DATABASE `" + cfg.DBName + "`").Error; err != nil {
		return err
	}
	defer base.Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`")
	db, err := store.Open(ctx, cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db); err != nil {
		return err
	}
	now := time.Now().UTC()
	act, err := store.NewCatalog(db, time.Now).CreateActivity(ctx, seckill.Activity{
		Name: "hot row", WindowStart: now.Add(-time.Minute), WindowEnd: now.Add(time.Hour),
		Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: 1,
		Prizes: []seckill.Prize{{Name: "batched", StockPerSession: *orders}, {Name: "per-order", StockPerSession: *perOrder}},
	})
	if err != nil {
		return err
	}
	sessions, err := store.NewCatalog(db, time.Now).Sessions(ctx, act.ID)
	if err != nil {
		return err
	}
	sid := sessions[0].ID
	grabs := func(prize int64, n int) []seckill.Grab {
		out := make([]seckill.Grab, n)
		for i := range out {
			out[i] = seckill.Grab{RequestID: seckill.RequestID(sid, prize, fmt.Sprintf("hot-%010d", i)),
				UserID: fmt.Sprintf("u%d", i), SessionID: sid, PrizeID: prize, AdmittedAt: now}
		}
		return out
	}
	o := store.NewOrders(db)

	var results []Result
	// Batched: one writer, as one consumer worker owns a prize.
	gs := grabs(act.Prizes[0].ID, *orders)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	start := time.Now()
	var conflicts int64
	for i := 0; i < len(gs); i += *batch {
		chunk := gs[i:min(i+*batch, len(gs))]
		for {
			if _, err := o.Persist(ctx, sid, act.Prizes[0].ID, chunk, time.Now()); err == nil {
				break
			} else if !store.IsTransient(err) {
				return err
			}
			conflicts++
		}
	}
	results = append(results, result(fmt.Sprintf("batched (%d per tx, outbox included)", *batch), len(gs), time.Since(start), conflicts))
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *skipPerOrder {
		fmt.Fprintf(stdout, "%+v\n", results[0])
		return nil
	}

	// One transaction per order: conditional UPDATE + INSERT.
	gs = grabs(act.Prizes[1].ID, *perOrder)
	var next, conf atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, *workers)
	start = time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(gs)) || ctx.Err() != nil {
					return
				}
				for {
					_, err := o.PersistOne(ctx, gs[i], time.Now())
					if err == nil {
						break
					}
					if !store.IsTransient(err) {
						errc <- err
						return
					}
					conf.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	results = append(results, result(fmt.Sprintf("one tx per order (%d writers)", *workers), len(gs), time.Since(start), conf.Load()))

	if *asJSON {
		return json.NewEncoder(stdout).Encode(results)
	}
	for _, r := range results {
		fmt.Fprintf(stdout, "%-40s %7d orders in %6.2fs = %8.0f orders/s (conflicts retried: %d)\n", r.Mode, r.Orders, r.Seconds, r.PerSecond, r.Conflicts)
	}
	fmt.Fprintf(stdout, "ratio batched / per-order: %.1f×\n", results[0].PerSecond/results[1].PerSecond)
	return nil
}

func result(mode string, n int, d time.Duration, conflicts int64) Result {
	return Result{Mode: mode, Orders: n, Seconds: d.Seconds(), PerSecond: float64(n) / d.Seconds(), Conflicts: conflicts}
}
