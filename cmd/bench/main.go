// Command bench measures the pipeline on the local real stack and writes results.json,
// results.md and chart.png into a results folder: the Redis admission ceiling, a trivial
// HTTP handler, the gateway (closed loop for the max, open loop at half of it for latency),
// the classic strategies side by side on one hot item, and persistence into one hot row.
// Every figure that matters is a ratio measured in the same run. It prints numbers; it
// asserts nothing. `bench -serve strategies` is the strategy server it starts for itself.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	serve := fs.String("serve", "", "internal: run the strategy server (used by bench itself)")
	addr := fs.String("addr", "127.0.0.1:18090", "internal: strategy server address")
	dsn := fs.String("dsn", "", "internal: strategy server database")
	redisAddr := fs.String("redis", "", "internal: strategy server redis")
	dir := fs.String("out", filepath.Join("results", time.Now().UTC().Format("20060102T150405Z")), "results folder")
	quick := fs.Bool("quick", false, "smaller runs (a smoke test of the bench itself)")
	binlog := fs.Bool("binlog", true, "also measure persistence with binary logging and sync_binlog=1 (restarts MariaDB twice)")
	only := fs.String("only", "", "run only these steps: ceiling,gateway,strategies,persistence")
	render := fs.String("render", "", "re-render results.md and chart.png from this folder's results.json, measuring nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serve == "strategies" {
		return serveStrategies(ctx, *addr, *dsn, *redisAddr, os.Getenv("SECKILL_JWT_SECRET"))
	}
	if *render != "" {
		js, err := os.ReadFile(filepath.Join(*render, "results.json"))
		if err != nil {
			return err
		}
		var rep report
		if err := json.Unmarshal(js, &rep); err != nil {
			return err
		}
		return write(*render, rep, out)
	}
	if os.Getenv("SECKILL_CLUSTER") == "1" {
		// The cluster profile (make bench PROFILE=cluster): its own small table (cluster.go).
		return clusterBench(ctx, out, *quick)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	b, err := newBench(ctx, out, *quick, *binlog)
	if err != nil {
		return err
	}
	b.only = *only
	defer b.close()
	started := time.Now()
	rep, err := b.all(ctx)
	if err != nil {
		return err
	}
	rep.DurationS = time.Since(started).Seconds()
	return write(*dir, rep, out)
}

func write(dir string, rep report, out io.Writer) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	md := rep.markdown()
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := chart(filepath.Join(dir, "chart.png"), rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s\nwritten to %s (results.json, results.md, chart.png)\n", md, dir)
	return nil
}

func createFile(path string) (*os.File, error) { return os.Create(path) }
