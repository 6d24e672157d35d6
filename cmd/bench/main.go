// Command bench measures the pipeline on the local real stack and writes results.json,
// results.md and one chart per question (strategies.png, persistence.png, latency.png,
// stages.png, buckets.png) into a results folder: the ceilings (the grab script straight at Redis, a
// trivial HTTP handler, one that verifies the same JWT), the gateway (closed-loop max, then
// latency against offered load in an open loop, with a per-stage breakdown from the
// services' histograms), the same curve with the whole pipeline persisting every grab
// (salecurve.go, the one the latency target is judged on), the classic strategies side by
// side on one hot item, persistence into one hot row, a whole sale, and one hot prize split
// into stock buckets (buckets.go; on the cluster profile with -only buckets). Every step runs once per repetition, interleaved,
// and each figure is reported as the median (min–max) over repetitions; every ratio is
// computed within one repetition. It prints numbers and judges targets in results.md; it
// asserts nothing. `bench -serve strategies` is the strategy server it starts for itself.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
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
	dsn := fs.String("dsn", "", "internal: strategy server database (none: only the ceilings /trivial and /jwt)")
	redisAddr := fs.String("redis", "", "internal: strategy server redis")
	dir := fs.String("out", filepath.Join("results", time.Now().UTC().Format("20060102T150405Z")), "results folder")
	quick := fs.Bool("quick", false, "smaller runs and one repetition (a smoke test of the bench itself)")
	reps := fs.Int("reps", 3, "repetitions, interleaved (-quick: 1)")
	binlog := fs.Bool("binlog", true, "also measure persistence with binary logging and sync_binlog=1 (restarts MariaDB once per repetition)")
	only := fs.String("only", "", "run only these steps: ceilings,gateway,salecurve,strategies,persistence,sale,buckets,open "+
		"(cluster profile: buckets, the only step there)")
	gatewayEnv := fs.String("gateway-env", "", "KEY=VALUE,... added to the gateways' environment in the gateway and salecurve steps (a client setting to try)")
	kafkaConfig := fs.String("kafka-config", "", "KEY=VALUE,... broker configs set on every broker (dynamically) for the gateway and salecurve steps and removed after (a broker setting to try)")
	compare := fs.String("compare", "", "a git revision, or \"shipped\": run every step that starts the deployables twice per repetition, as that baseline and as this tree (with -gateway-env/-kafka-config), and report the paired change (compare.go)")
	profile := fs.Bool("profile", false, "also write profiles of the gateway into the results folder, one set per repetition (and side): "+
		"CPU at its closed-loop max (gateway step), CPU, allocations and live heap at the open (open step) (profile.go)")
	openConns := fs.Int("open-connections", openDefaultConnections, "the open step's connections (vegeta's -connections and -max-connections)")
	pinGenerator := fs.Bool("pin-generator", false, "the open step runs vegeta under taskset -c 1 (trivial and gateway runs alike; nothing else pinned)")
	render := fs.String("render", "", "re-render results.md and the charts from this folder's results.json, measuring nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serve == "strategies" {
		return serveStrategies(ctx, *addr, *dsn, *redisAddr, os.Getenv("SECKILL_JWT_SECRET"), os.Getenv("SECKILL_BENCH_JWKS_FILE"))
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
	cluster := os.Getenv("SECKILL_CLUSTER") == "1"
	if cluster && *only == "" {
		// The cluster profile (make bench PROFILE=cluster): its own small table (cluster.go).
		// With -only it runs the profile's steps (clusterSteps) like any other run.
		return clusterBench(ctx, out, *quick)
	}
	if *quick {
		*reps = 1
	}
	if *reps < 1 || *reps > 9 {
		return fmt.Errorf("-reps must be 1 to 9, not %d", *reps)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	rep := report{Machine: machine(ctx)}
	b, err := newBench(out, *quick, *binlog, *reps)
	if err != nil {
		return err
	}
	defer b.close()
	if *openConns < 1 {
		return fmt.Errorf("-open-connections must be at least 1, not %d", *openConns)
	}
	b.openConns, b.pinGenerator = *openConns, *pinGenerator
	if b.cluster = cluster; cluster {
		rep.Machine["kafka"] = "Apache Kafka 4.4.0 (KRaft, three brokers, cluster profile)"
		rep.Machine["note"] += "; cluster profile: a six-node Redis Cluster (three primaries), three brokers, MariaDB primary and replica"
	}
	if b.only, err = parseOnly(*only, b.steps()); err != nil {
		return err
	}
	if *profile {
		if cluster || (len(b.only) > 0 && !b.only["gateway"] && !b.only["open"]) {
			return fmt.Errorf("-profile samples the gateway and open steps of the single profile: add one of them to -only")
		}
		b.profileDir = *dir
	}
	if b.gatewayEnv, err = parseSettings(*gatewayEnv); err != nil {
		return fmt.Errorf("-gateway-env: %w", err)
	}
	if b.kafkaConfig, err = parseSettings(*kafkaConfig); err != nil {
		return fmt.Errorf("-kafka-config: %w", err)
	}
	rep.Settings = settingsNote(b.gatewayEnv, b.kafkaConfig)
	if *compare != "" {
		base, cand, err := splitCompare(*compare)
		if err != nil {
			return err
		}
		if base == compareShipped && len(b.gatewayEnv) == 0 && len(b.kafkaConfig) == 0 {
			return fmt.Errorf("-compare shipped needs -gateway-env or -kafka-config: the two sides would be the same")
		}
		if cand != "" {
			if err := b.useRevision(cand); err != nil {
				return err
			}
		}
		if b.base, err = buildBase(base, b.bin, b.logf); err != nil {
			return err
		}
		rep.Compare = *compare
		rep.Machine["commit"] = "bench " + rep.Machine["commit"] + ", compared " + *compare
	}
	started := time.Now()
	runErr := b.all(ctx, &rep)
	rep.DurationS = time.Since(started).Seconds()
	if runErr != nil {
		if len(rep.Rows) == 0 {
			return runErr
		}
		// Keep what the finished repetitions measured; the run still fails.
		rep.Error = runErr.Error()
		if err := write(*dir, rep, out); err != nil {
			return errors.Join(runErr, err)
		}
		return runErr
	}
	return write(*dir, rep, out)
}

func write(dir string, rep report, out io.Writer) error {
	rep.Stages = stages(rep.Rows)
	rep.Comparisons = compareRows(rep.Rows)
	rep.Targets = evaluate(rep.Rows)
	charts, err := drawCharts(dir, rep)
	if err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	md := rep.markdown(charts)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s\nwritten to %s (results.json, results.md, %s)\n", md, dir, strings.Join(charts, ", "))
	return nil
}
