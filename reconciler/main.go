// Command reconciler keeps Redis and MySQL honest: it corrects stock drift, re-publishes
// stale reservations, replays the compensation topic and runs the session lifecycle, on a
// schedule or once (--once).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/buildinfo"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/memlimit"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

func main() {
	if buildinfo.PrintVersion(os.Args[1:], "reconciler", os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errFoundProblems) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "reconciler:", err)
		os.Exit(1)
	}
}

// errFoundProblems makes --once exit non-zero so a cron scheduler alerts.
var errFoundProblems = errors.New("reconcile run found problems it could not fix")

// run writes reports to stdout. Logs go to stdout too in scheduler mode (JSON lines for the
// log pipeline) and to stderr with --once, so the report is all a cron job's stdout holds.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// The operator commands (tools.go) are words, the scheduler's options flags.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return runTool(ctx, args[0], args[1:], getenv, stdout)
	}
	fs := flag.NewFlagSet("reconciler", flag.ContinueOnError)
	once := fs.Bool("once", false, "run once, print the report and exit (for cron / Kubernetes CronJob)")
	asJSON := fs.Bool("json", false, "print reports as JSON instead of a table")
	checkOnly := fs.Bool("check", false, "check the servers, the topics' partition counts and the schema against this build, print the result and exit (before an upgrade)")
	// The flag package's own messages would go out before ours: the usage is written below,
	// to stdout for --help (exit 0) and into the error otherwise.
	fs.SetOutput(io.Discard)
	usage := func() string {
		var b strings.Builder
		fmt.Fprintln(&b, "usage: reconciler [--once [--json] | --check]")
		fmt.Fprintln(&b, toolsUsage)
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		return b.String()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, usage())
		config.WriteSettings(stdout, "reconciler")
		return nil
	} else if err != nil {
		return fmt.Errorf("%w\n%s", err, usage())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), usage())
	}
	cfg, err := config.LoadReconciler(getenv)
	if err != nil {
		return err
	}
	logOut := stdout
	if *checkOnly && (*once || *asJSON) {
		return fmt.Errorf("--check runs alone\n%s", usage())
	}
	if *once || *checkOnly {
		logOut = stderr
	}
	// Lines logged with a context inside a span carry its trace_id and span_id.
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: cfg.LogLevel})))

	// Before anything allocates much: the soft limit makes the collector work harder as the
	// heap nears the container's limit, instead of the kernel killing the process.
	soft, err := memlimit.Apply(cfg.MemLimit)
	if err != nil {
		return err
	}
	log.LogAttrs(ctx, slog.LevelInfo, "memory limit", soft.Attrs()...)

	// Off unless an OTLP endpoint is set (OTEL_*); a setting it does not support stops the
	// reconciler here, named.
	tr, flushSpans, err := tracing.ForService(ctx, "reconciler", cfg.Tracing.Get, log, cfg.ShutdownTimeout)
	if err != nil {
		return err
	}
	// Runs last: a --once run's spans, and the last scheduled run's, are flushed before
	// the process ends.
	defer flushSpans()

	srv, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.close()
	db, rdb, gate, kafkaAdmin := srv.db, srv.rdb, srv.gate, srv.admin
	catalog := store.NewCatalog(db, time.Now)
	orders := store.NewOrders(db)
	// A missing ACL or a refused login stops the reconciler here, named, not in its first run.
	if err := kafkaAdmin.CheckAccess(ctx,
		event.Need{Op: event.OpRead, Topic: cfg.Topics.Compensation.Name}, event.Need{Op: event.OpDescribe, Group: cfg.ConsumerGroup},
		event.Need{Op: event.OpDescribe, Group: cfg.FeedbackGroup}, event.Need{Op: event.OpDescribe, Topic: cfg.Topics.Feedback.Name},
		event.Need{Op: event.OpWrite, Topic: cfg.Topics.Grab.Name}, event.Need{Op: event.OpWrite, Topic: cfg.Topics.DeadLetter.Name}); err != nil {
		return err
	}
	// The reconciler maps a session×prize to its grab partition (and an order to its
	// feedback partition) by hashing over the configured count; with another count on the
	// broker every lag it reads is another prize's, so it refuses to act at all.
	if err := kafkaAdmin.CheckPartitions(ctx, cfg.Topics.Grab, cfg.Topics.Compensation, cfg.Topics.Feedback); err != nil {
		return err
	}
	if *checkOnly {
		return check(ctx, stdout, db, kafkaAdmin, cfg.ConsumerGroup, cfg.Topics)
	}
	grabs, err := event.NewGrabWriter(cfg.KafkaBrokers, cfg.Topics.Grab.Name, event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer grabs.Close()
	deadLetterWriter, err := event.NewDeadLetterWriter(cfg.KafkaBrokers, cfg.Topics.DeadLetter, event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer deadLetterWriter.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildinfo.Register(reg, "reconciler")
	deadLettersWritten := newDeadLettersCounter(reg)
	dlWriter, err := event.NewDeadLetters(deadLetterWriter, deadLettersWritten, cfg.Topics.DeadLetter.MaxMessageBytes)
	if err != nil {
		return err
	}
	cases := store.NewExceptions(db)
	deadLetters := exception.NewDeadLetters(dlWriter, cases, time.Now, log)
	lag := grabLag{reader: kafkaAdmin, group: cfg.ConsumerGroup, topic: cfg.Topics.Grab}
	comp := &compensationJob{
		bounds: kafkaAdmin, offsets: catalog, deadLetters: deadLetters, cases: cases,
		write: writepath.New(orders, gate, retry.Default(), nil, log, time.Now).WithTracing(tr),
		topic: cfg.Topics.Compensation, budget: cfg.ReplayBudget,
		metrics: newCompensationMetrics(reg), log: log, now: time.Now,
		open: func(partition int, offset int64) (partitionReader, error) {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: cfg.KafkaBrokers, Dialer: cfg.Kafka.Dialer(), Topic: cfg.Topics.Compensation.Name,
				Partition: partition, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 250 * time.Millisecond,
				// kafka-go's queue counts messages whatever their size: a few, so it holds a
				// few MiB of the topic's largest, not a hundred.
				QueueCapacity: 8})
			if err := r.SetOffset(offset); err != nil {
				r.Close()
				return nil, fmt.Errorf("compensation partition %d at offset %d: %w", partition, offset, err)
			}
			return r, nil
		},
	}
	republished, settled := newStaleMetrics(reg)
	// The runner and the rebalance loop take turns at the one lease: the fences of the
	// transfers' scripts and journal are its numbers.
	held := newSerialLeaser(lease.New(db, cfg.LeaseName, cfg.LeaseTTL))
	entries, err := draw.NewEntries(ctx, rdb)
	if err != nil {
		return err
	}
	draws := draw.NewRunner(draw.RunnerConfig{Book: store.NewDraws(db, time.Now), Entries: entries, Gate: gate, Grabs: grabs,
		Beacon: cfg.DrawBeacon, Grace: cfg.KeyGrace, Page: cfg.DrawPage, Log: log, Now: time.Now})
	transfers := transferExecutor{catalog: catalog, gate: gate, grace: cfg.KeyGrace, metrics: newRebalanceMetrics(reg), now: time.Now}
	r := &runner{
		lease:   held,
		reports: store.NewRunReports(db),
		metrics: newRunnerMetrics(reg),
		log:     log,
		now:     time.Now,
		tr:      tr,
		// Order matters: replay compensation before judging reservations stale, rebuild lost
		// keys before giving cancelled units back (a unit the rebuild counted is then found
		// done) and both before measuring drift, report sessions, then the open exception
		// cases (which the jobs before may have recorded).
		jobs: []job{
			transfersJob{exec: transfers},
			preheatJob{preheater: preheat.New(catalog, gate, cfg.KeyGrace, time.Now).WithDraws(draws), lead: cfg.PreheatLead},
			// After the preheat (which commits and arms draws) and before the stale job (which
			// would otherwise find a winner just admitted and not yet published).
			drawsJob{runner: draws},
			comp,
			rebuildJob{catalog: catalog, orders: orders, gate: gate, lag: lag, compensation: comp,
				gateways: store.NewUnpublished(db), gatewayAlive: cfg.GatewayDeadAfter, grace: cfg.KeyGrace, catchUp: cfg.CatchUpWait, rebuilt: newRebuiltCounter(reg), transfers: transfers, log: log, now: time.Now},
			staleJob{catalog: catalog, gate: gate, orders: orders, lag: lag, grabs: grabs, topic: cfg.Topics.Grab.Name, stale: cfg.StaleAfter,
				bound: cfg.RepublishBound, grace: cfg.KeyGrace, republished: republished, settled: settled,
				cases: cases, caseAfter: cfg.StaleCaseAfter, log: log, now: time.Now, tr: tr},
			paymentJob{catalog: catalog, orders: orders, returns: store.NewReturns(db), gate: gate, grace: cfg.KeyGrace,
				batch: 500, perRun: 5000, sweep: 2000, metrics: newPaymentMetrics(reg), log: log, now: time.Now, tr: tr,
				feedback: grabLag{reader: kafkaAdmin, group: cfg.FeedbackGroup, topic: cfg.Topics.Feedback}},
			driftJob{catalog: catalog, gate: gate, returns: store.NewReturns(db), orders: orders, lag: lag, grace: cfg.KeyGrace,
				cases: cases, caseRuns: cfg.DriftCaseRuns, metrics: newDriftMetrics(reg), log: log, now: time.Now},
			lifecycleJob{catalog: catalog, gate: gate, orders: orders, returns: store.NewReturns(db), grace: cfg.KeyGrace, log: log, now: time.Now},
			exceptionsJob{cases: cases},
		},
	}
	if *once {
		rep, err := r.runOnce(ctx)
		if perr := rep.print(stdout, *asJSON); perr != nil && err == nil {
			err = perr
		}
		if err == nil && rep.Failed() {
			err = errFoundProblems
		}
		return err
	}

	// Read-only, so outside the lease: every instance exports the stock side by side.
	stockGauge := &stockGauges{catalog: catalog, gate: gate, lead: cfg.PreheatLead, grace: cfg.KeyGrace,
		every: cfg.Interval, metrics: newStockMetrics(reg), log: log, now: time.Now}
	openCases := newOpenCasesGauge(reg, cases, cfg.Interval, log)
	servers := &serverGauges{
		mysql: mysqlProbe{ping: func(ctx context.Context) error { return store.Ping(ctx, db) },
			readOnly: func(ctx context.Context) (bool, error) { return store.ReadOnly(ctx, db) }},
		kafka:  kafkaAdmin,
		topics: []event.Topic{cfg.Topics.Grab, cfg.Topics.Compensation, cfg.Topics.Feedback, cfg.Topics.DeadLetter},
		every:  cfg.Interval, metrics: newServerMetrics(reg), log: log,
	}
	r.metrics.interval.Set(cfg.Interval.Seconds())
	var replica *replicaGauges
	if cfg.MySQLReplicaDSN != "" {
		// Not at start-up: a replica that is down must not keep the reconciler from running
		// (it only shows up in the gauges); the pool dials on each sample.
		replicaDB, err := store.Sampler(store.Conn{DSN: cfg.MySQLReplicaDSN, TLS: cfg.MySQLTLS})
		if err != nil {
			return fmt.Errorf("SECKILL_MYSQL_REPLICA_DSN: %w", err)
		}
		defer replicaDB.Close()
		writer, err := db.DB()
		if err != nil {
			return err
		}
		replica = newReplicaGauges(reg, func(ctx context.Context) (replicaStatus, error) {
			return readReplication(ctx, writer, replicaDB)
		}, cfg.Interval, log)
	}
	mux := http.NewServeMux()
	ops.Register(mux, reg, map[string]ops.Check{
		"mysql": func(ctx context.Context) error { return store.Ping(ctx, db) },
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	})

	log.Info("reconciler starting", "http_addr", cfg.HTTPAddr, "interval", cfg.Interval.String(),
		"preheat_lead", cfg.PreheatLead.String(), "key_grace", cfg.KeyGrace.String(), "stale_after", cfg.StaleAfter.String(),
		"catch_up_wait", cfg.CatchUpWait.String(), "gateway_dead_after", cfg.GatewayDeadAfter.String(), "republish_bound", cfg.RepublishBound.String(),
		"consumer_group", cfg.ConsumerGroup, "feedback_group", cfg.FeedbackGroup, "lease", cfg.LeaseName,
		"stale_case_after", cfg.StaleCaseAfter.String(), "drift_case_runs", cfg.DriftCaseRuns, "rebalance_interval", cfg.RebalanceInterval.String(),
		"bucket_prizes_refresh", cfg.BucketPrizesRefresh.String(),
		"redis_addr", cfg.RedisAddr, "redis_user", cfg.RedisUsername, "redis_tls", cfg.RedisTLS != nil,
		"kafka_brokers", cfg.KafkaBrokers, "kafka_security", cfg.Kafka.String(), "mysql_tls", cfg.MySQLTLS != nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ops.Serve(gctx, ops.NewServer(cfg.HTTPAddr, mux), cfg.ShutdownTimeout) })
	g.Go(func() error { return schedule(gctx, r, cfg.Interval, log) })
	g.Go(func() error { return stockGauge.Run(gctx) })
	g.Go(func() error { return openCases.Run(gctx) })
	g.Go(func() error { return servers.Run(gctx) })
	if replica != nil {
		g.Go(func() error { return replica.Run(gctx) })
	}
	rebalancing := rebalanceLoop{rebalancer: rebalancer{catalog: catalog, reader: redisBuckets{rdb: rdb}, exec: transfers, metrics: transfers.metrics},
		lease: held, every: cfg.RebalanceInterval, listed: &bucketedPrizes{every: cfg.BucketPrizesRefresh}, log: log, now: time.Now}
	g.Go(func() error { return rebalancing.Run(gctx) })
	g.Go(func() error {
		return drawLoop{runner: draws, lease: held, every: cfg.DrawInterval, grace: cfg.KeyGrace, log: log}.Run(gctx)
	})
	err = g.Wait()
	log.Info("reconciler stopped", "error", fmt.Sprint(err))
	return err
}

// servers are the connections both the scheduler and the operator commands open.
type servers struct {
	db    *gorm.DB
	rdb   redis.UniversalClient
	gate  *stock.Gate
	admin *event.Admin
}

// connect opens MySQL, Redis (with the gate's scripts loaded) and the Kafka admin client.
func connect(ctx context.Context, cfg config.Reconciler) (srv servers, err error) {
	defer func() {
		if err != nil {
			srv.close()
		}
	}()
	if srv.db, err = store.Connect(ctx, cfg.MySQL()); err != nil {
		return srv, err
	}
	if srv.rdb, err = stock.Dial(ctx, cfg.Redis()); err != nil {
		return srv, err
	}
	if srv.gate, err = stock.NewGate(ctx, srv.rdb); err != nil {
		return srv, err
	}
	srv.admin, err = event.NewAdmin(cfg.KafkaBrokers, event.AdminSecurity(cfg.Kafka))
	return srv, err
}

func (s servers) close() {
	if s.rdb != nil {
		s.rdb.Close()
	}
	if s.db != nil {
		store.Close(s.db)
	}
}

// schedule runs the reconciler every interval until ctx ends. A failed run is logged and
// retried next tick: the scheduler itself never gives up.
func schedule(ctx context.Context, r *runner, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rep, err := r.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Error("reconcile run failed", "error", err.Error())
		case rep.Lease == "busy":
			log.Debug("reconcile run skipped: another instance holds the lease")
		default:
			level := slog.LevelInfo
			if rep.Failed() {
				level = slog.LevelError
			}
			log.Log(ctx, level, "reconcile run", "fence", rep.Fence, "duration_ms", rep.DurationMS, "jobs", rep.Jobs)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
