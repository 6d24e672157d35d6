// Command gateway is the HTTP front of the flash sale: it verifies the user, admits a grab
// through one atomic Redis script, emits the grab event to Kafka and answers 202 with a
// request id to poll. It also serves the admin API on its own listener.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/seckill-pipeline/seckill/gateway/admin"
	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/console"
	"github.com/seckill-pipeline/seckill/gateway/grab"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/lockout"
	"github.com/seckill-pipeline/seckill/gateway/operator"
	"github.com/seckill-pipeline/seckill/gateway/ratelimit"
	"github.com/seckill-pipeline/seckill/gateway/schedule"
	"github.com/seckill-pipeline/seckill/gateway/sessionstore"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/buildinfo"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/memlimit"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

func main() {
	if buildinfo.PrintVersion(os.Args[1:], "gateway", os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dispatch(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

const usage = `usage: gateway [serve|migrate|token]
  serve                  run the grab API and the admin API (default)
  migrate                apply the MySQL schema migrations the database has not seen, then exit
  token USER [TTL]       print a user token signed with SECKILL_JWT_SECRET (demos and tests;
                         production tokens come from the shop's identity provider)`

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch {
	case cmd == "serve" && len(args) <= 1:
		return run(ctx, getenv, stdout)
	case cmd == "migrate" && len(args) == 1:
		return migrate(ctx, getenv, stdout)
	case cmd == "token" && (len(args) == 2 || len(args) == 3):
		return token(getenv, args[1:], stdout)
	case (cmd == "help" || cmd == "-h" || cmd == "-help" || cmd == "--help") && len(args) == 1:
		// Only the usage and the settings: help starts nothing and reads no variable.
		fmt.Fprintf(stdout, "%s\n\n", usage)
		config.WriteSettings(stdout, "gateway")
		return nil
	}
	return fmt.Errorf("unknown arguments %q\n%s", args, usage)
}

// migrate applies pending schema migrations: an explicit step, never a side effect of
// starting a service.
func migrate(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.LoadCommon(getenv)
	if err != nil {
		return err
	}
	db, err := store.Connect(ctx, cfg.MySQLMigrate())
	if err != nil {
		return err
	}
	defer store.Close(db)
	res, err := store.Migrate(ctx, db)
	for _, name := range res.Resumed {
		fmt.Fprintf(stdout, "migration %s had been interrupted; finished it\n", name)
	}
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintln(stdout, "schema up to date")
		return nil
	}
	fmt.Fprintf(stdout, "applied migrations %v\n", res.Applied)
	return nil
}

func token(getenv func(string) string, args []string, stdout io.Writer) error {
	cfg, err := config.LoadGateway(getenv)
	if err != nil {
		return err
	}
	if !seckill.ValidUserID(args[0]) {
		return fmt.Errorf("user %q: want 1 to 64 printable characters without '|'", args[0])
	}
	ttl := time.Hour
	if len(args) == 2 {
		if ttl, err = time.ParseDuration(args[1]); err != nil || ttl <= 0 {
			return fmt.Errorf("ttl %q: want a positive duration such as 1h", args[1])
		}
	}
	if ttl > cfg.JWTMaxLifetime {
		return fmt.Errorf("ttl %s: longer than SECKILL_JWT_MAX_LIFETIME (%s), which the gateways would refuse", ttl, cfg.JWTMaxLifetime)
	}
	tok, err := auth.NewSigner([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience).Token(args[0], time.Now(), ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.LoadGateway(getenv)
	if err != nil {
		return err
	}
	// Lines logged with a request's context carry its trace_id and span_id.
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel})))
	// OpenTelemetry from the OTEL_* variables: off (and free) without an OTLP endpoint; a
	// setting it does not support stops the start here, like any bad configuration.
	tr, err := tracing.Setup(ctx, "gateway", cfg.Tracing.Get)
	if err != nil {
		return err
	}
	// Registered first, so it runs last: the spans of the requests the HTTP servers finish
	// and of the produces the relay and the writers flush at shutdown are all ended by then.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), min(spanFlush, cfg.ShutdownTimeout))
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("spans not flushed at shutdown", "error", err.Error())
		}
	}()

	// Before anything allocates much: the soft limit makes the collector work harder as the
	// heap nears the container's limit, instead of the kernel killing the process.
	soft, err := memlimit.Apply(cfg.MemLimit)
	if err != nil {
		return err
	}
	log.LogAttrs(ctx, slog.LevelInfo, "memory limit", soft.Attrs()...)

	rdb, err := stock.Dial(ctx, cfg.Redis())
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Concurrent grabs share Redis round trips (pipelines of up to 64 scripts, 4 in flight).
	gate, err := stock.NewGate(ctx, rdb, stock.WithCoalescing(64, 4))
	if err != nil {
		return err
	}
	defer gate.Close() // after the HTTP servers stopped (defers run in reverse)
	db, err := store.Connect(ctx, cfg.MySQL())
	if err != nil {
		return err
	}
	defer store.Close(db)
	// kafka-go allocates room for BatchSize messages (about 160 bytes each) for every batch it
	// starts, and a grab batch holds what arrives for one partition within the batch timeout
	// (SECKILL_KAFKA_BATCH_TIMEOUT, 1 ms by default): a few dozen at the rates a gateway
	// serves. The default 500 made the gateway allocate and clear about 80 KB per batch,
	// every millisecond, for nothing; a full batch is sent at once, so a smaller cap costs no
	// latency.
	newGrabWriter := func() (*kafka.Writer, error) {
		return event.NewGrabWriter(cfg.KafkaBrokers, cfg.Topics.Grab.Name, event.WithSecurity(cfg.Kafka),
			event.WithBatchSize(grab.Batch), event.WithBatchTimeout(cfg.KafkaBatchTimeout))
	}
	grabs, err := newGrabWriter()
	if err != nil {
		return err
	}
	// Closed after the HTTP servers and the relay stopped (defers run in reverse), so every
	// admitted grab's event is flushed before the process exits.
	defer grabs.Close()
	// SECKILL_KAFKA_WRITERS > 1: more writers for the grab events, used in turn (writers.go).
	grabWriters := []grab.Publisher{grabs}
	for range cfg.KafkaWriters - 1 {
		w, err := newGrabWriter()
		if err != nil {
			return err
		}
		defer w.Close()
		grabWriters = append(grabWriters, w)
	}
	grabEvents := grab.NewWriterPool(grabWriters...)
	kafkaAdmin, err := event.NewAdmin(cfg.KafkaBrokers, event.AdminSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	// A missing ACL or a refused login stops the gateway here, named, not at the first grab.
	if err := kafkaAdmin.CheckAccess(ctx,
		event.Need{Op: event.OpWrite, Topic: cfg.Topics.Grab.Name}, event.Need{Op: event.OpWrite, Topic: cfg.Topics.Compensation.Name},
		event.Need{Op: event.OpDescribe, Group: cfg.ConsumerGroup}); err != nil {
		return err
	}
	keys := newKeySetSource(cfg)
	verifier, jwks, err := newVerifier(ctx, cfg, keys)
	if err != nil {
		return err
	}
	if cfg.JWTSecret != "" {
		log.Warn("user tokens verified with an HS256 secret: this gateway can mint any user's token; in production verify the identity provider's public keys (SECKILL_JWT_JWKS_FILE or _URL) and set no secret",
			"jwks", keys != nil)
	}

	catalog := store.NewCatalog(db, time.Now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildinfo.Register(reg, "gateway")
	m := newMetrics(reg)

	draws := store.NewDraws(db, time.Now)
	entries, err := draw.NewEntries(ctx, rdb)
	if err != nil {
		return err
	}
	sched := schedule.New(catalog, cfg.ScheduleRefresh, time.Now).WithDraws(draws)
	sched.OnLoaded = func(at time.Time) { m.scheduleLoaded.Set(float64(at.UnixMilli()) / 1000) }
	if err := sched.Reload(ctx); err != nil {
		return err
	}
	preheater := preheat.New(catalog, gate, cfg.KeyGrace, time.Now).WithDraws(draw.NewArmer(draws, entries, cfg.DrawBeacon))
	jwtFiles := newJWTSecrets(cfg, verifier, keys, jwks, reg, log)
	checks := map[string]ops.Check{
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		"kafka": kafkaAdmin.Ping,
	}
	id, err := gatewayID()
	if err != nil {
		return err
	}
	clients := clientip.New(cfg.TrustedProxies)
	replica, err := replicaWaitFor(ctx, rdb, gate, cfg.ReplicaWait, log)
	if err != nil {
		return err
	}
	grabAPI := grab.New(grab.Config{
		Gate: gate, Orders: store.NewOrders(db), Verifier: verifier, UserHeader: cfg.TrustUserHeader,
		UserProxies: clientip.New(cfg.UserHeaderProxies), Clients: clients,
		Schedule: sched, SoldOutRecheck: cfg.SoldOutRecheck,
		PerUser: ratelimit.NewKeyed(cfg.RatePerUser, cfg.BurstPerUser, cfg.RateMaxKeys, time.Now),
		PerIP:   ratelimit.NewKeyed(cfg.RatePerIP, cfg.BurstPerIP, cfg.RateMaxKeys, time.Now),
		Events:  grabEvents, RelayQueue: cfg.RelayQueue, MaxInflight: cfg.MaxInflight, ProduceTimeout: cfg.ProduceTimeout,
		// The limit starts at its maximum: the open's first wave is not refused while a limit
		// grows; it shrinks when the grab path queues (package admission).
		Admission: admission.Config{Tolerance: cfg.AdmissionTolerance, Min: cfg.AdmissionMin, Max: cfg.AdmissionMax,
			Start: cfg.AdmissionMax, RetryAfterMax: cfg.AdmissionRetryAfterMax},
		Replica: replica, ReplicaWait: cfg.ReplicaWait,
		BucketOthersCache: cfg.BucketOthersCache, BucketWantedTTL: cfg.BucketWantedTTL,
		Registry: reg, Tracing: tr, Topic: cfg.Topics.Grab.Name, Log: log, Now: time.Now,
		Entries: entries, Board: draw.NewPublic(draws, entries, time.Second, time.Now),
	})
	// The public listener gets its own cheap, quiet /readyz (see readiness) and no metrics.
	public := http.NewServeMux()
	public.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		jsonapi.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	public.Handle("GET /readyz", newReadiness(checks, ratelimit.NewKeyed(20, 40, cfg.RateMaxKeys, time.Now), clients, time.Now, log))
	grabAPI.Register(public)

	// After an admin change, this instance sees it at once; others within ScheduleRefresh.
	onChange := func() {
		grabAPI.ClearSoldOut()
		if err := sched.Reload(context.WithoutCancel(ctx)); err != nil {
			log.Warn("schedule reload after admin change failed", "error", err.Error())
		}
	}
	// The admin listener's /healthz and /readyz stay open for probes (its /readyz names each
	// failing dependency and why); metrics describe the inside (routes, error rates,
	// dependencies) and sit behind the admin token like the rest of the admin API.
	adminMux := http.NewServeMux()
	ops.Register(adminMux, nil, checks)
	// Each operator has a credential of their own (SECKILL_ADMIN_TOKENS_FILE, re-read when
	// it changes; SECKILL_ADMIN_TOKEN is the credential "admin"): its name is the actor in
	// the audit logs.
	creds, err := operator.Load(cfg.AdminTokensFile, cfg.AdminToken, func(err error) {
		log.Error("admin tokens file not reloaded", "error", err.Error())
	})
	if err != nil {
		return err
	}
	if err := creds.AcceptPrevious(cfg.AdminTokenPrevious); err != nil {
		return err
	}
	creds.Register(reg)
	// The operator console: a page on the admin listener, signed in with an operator's admin
	// token (the session, in that credential's name, kept in an HttpOnly cookie), whose every
	// API call is checked like a bearer call.
	secret, err := consoleSecret(cfg, log)
	if err != nil {
		return err
	}
	// Sessions live in Redis, which every gateway shares: a sign-in holds on any replica, and a
	// sign-out (or an idle timeout) ends it on all of them.
	con := console.New(console.Config{Credentials: creds, Secret: secret, TTL: cfg.ConsoleSession, Idle: cfg.ConsoleIdle,
		Sessions: sessionstore.New(rdb), Now: time.Now,
		Logins: ipBuckets{ratelimit.NewKeyed(float64(cfg.ConsoleLoginRate)/60, cfg.ConsoleLoginRate, 10_000, time.Now)},
		Remote: clients.Of, Log: log})
	con.Register(adminMux)
	compensation, err := event.NewWriter(cfg.KafkaBrokers, cfg.Topics.Compensation.Name, event.WithSecurity(cfg.Kafka))
	if err != nil {
		return err
	}
	defer compensation.Close()
	cases := store.NewExceptions(db)
	replayer := exception.NewReplayer(store.NewOrders(db), catalog, gate, cfg.Topics, grabs, compensation)
	adm := admin.New(admin.Config{Catalog: catalog, Draws: draws, Gate: gate, Preheater: preheater, Tokens: creds, Console: con,
		Remote: clients.Of, OnChange: onChange, BucketUnits: cfg.BucketUnits, BucketMax: cfg.BucketMax,
		// Wrong bearer tokens per client (an IPv6 /64 is one), a table of at most 10,000 clients.
		Lockout:      lockout.New(cfg.AdminAuthFailures, cfg.AdminAuthWindow, 10_000, time.Now),
		AuthFailures: m.adminAuthFailures,
		Cases:        cases, Orders: store.NewOrders(db), Runs: store.NewRunReports(db), Replay: replayer.Replay,
		OnCaseAction: func(action, kind string, refused bool) {
			result := "done"
			if refused {
				result = "refused"
			}
			m.caseActions.WithLabelValues(action, kind, result).Inc()
		},
		Kafka: kafkaAdmin, Group: cfg.ConsumerGroup, Topics: cfg.Topics,
		// OpenMetrics for a scraper that asks for it: the only format with exemplars (the
		// grab latencies' trace ids); the text format for the others.
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}), Now: time.Now, Log: log})
	// Every admin route has its row in the route table, and every row its handler.
	if err := adm.Register(adminMux); err != nil {
		return err
	}

	log.Info("gateway starting", "gateway_id", id,
		"http_addr", cfg.HTTPAddr, "admin_addr", cfg.AdminAddr,
		"redis_addr", cfg.RedisAddr, "redis_user", cfg.RedisUsername, "redis_tls", cfg.RedisTLS != nil,
		"redis_maxmemory_policy", "noeviction", "kafka_security", cfg.Kafka.String(), "mysql_tls", cfg.MySQLTLS != nil,
		"kafka_brokers", cfg.KafkaBrokers, "grab_topic", cfg.Topics.Grab.Name, "kafka_acks", "all",
		"kafka_batch_timeout", grabs.BatchTimeout.String(), "kafka_writers", len(grabWriters), "produce_timeout", cfg.ProduceTimeout.String(),
		"replica_wait", replicaWaitLabel(replica, cfg.ReplicaWait),
		"jwt_issuer", cfg.JWTIssuer, "jwt_audience", cfg.JWTAudience, "jwt_previous_secret", cfg.JWTSecretPrevious != "", "jwt_max_lifetime", cfg.JWTMaxLifetime.String(),
		"jwt_secret_reloaded", jwtFiles != nil, "trust_user_header", cfg.TrustUserHeader,
		"trusted_proxies", fmt.Sprint(cfg.TrustedProxies), "user_header_proxies", fmt.Sprint(cfg.UserHeaderProxies),
		"max_inflight", cfg.MaxInflight, "admission_tolerance", cfg.AdmissionTolerance,
		"admission_min", cfg.AdmissionMin, "admission_max", cfg.AdmissionMax, "rate_per_user", cfg.RatePerUser, "burst_per_user", cfg.BurstPerUser,
		"rate_per_ip", cfg.RatePerIP, "burst_per_ip", cfg.BurstPerIP, "soldout_recheck", cfg.SoldOutRecheck.String(),
		"schedule_refresh", cfg.ScheduleRefresh.String(), "key_grace", cfg.KeyGrace.String(),
		"tracing_sampler", tr.Sampler())

	// The relay outlives the HTTP servers: it stops (and drains) only after they stopped
	// accepting grabs, so an event handed to it during shutdown still gets its chance. Its
	// drain is bounded by SECKILL_SHUTDOWN_TIMEOUT even if Kafka hangs: what it leaves stays
	// reserved in Redis, and the reconciler re-publishes stale reservations.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = grabAPI.RunRelay(relayCtx, cfg.ShutdownTimeout) }()
	// The heartbeat with this gateway's unpublished grabs (for the reconciler's rebuild
	// guard) stops after the relay drained, and the gateway then leaves the table.
	reportCtx, stopReport := context.WithCancel(context.WithoutCancel(ctx))
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		grabAPI.ReportUnpublished(reportCtx, store.NewUnpublished(db), id, config.GatewayHeartbeat)
	}()
	defer func() { stopRelay(); <-relayDone; stopReport(); <-reportDone }()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return ops.Serve(gctx, ops.NewServer(cfg.HTTPAddr, traced(tr, jsonapi.Errors(public))), cfg.ShutdownTimeout)
	})
	g.Go(func() error {
		return ops.Serve(gctx, ops.NewServer(cfg.AdminAddr, traced(tr, adminListener(adminMux, newAdminHosts(cfg.AdminAddr, cfg.AdminHosts)))),
			cfg.ShutdownTimeout)
	})
	if jwtFiles != nil {
		g.Go(func() error { jwtFiles.Run(gctx); return nil })
	}
	g.Go(func() error { return grabAPI.Run(gctx) })
	g.Go(func() error {
		return sched.Run(gctx, func(err error) {
			m.scheduleErrors.Inc()
			log.Warn("schedule reload failed; serving the last good copy", "error", err.Error())
		})
	})
	err = g.Wait()
	log.Info("gateway stopped", "error", errString(err))
	return err
}

// adminListener is what the admin listener serves: the console's security headers on every
// answer (errors, redirects and refusals included), then the Host check, then mux with JSON
// errors for unknown routes.
func adminListener(mux *http.ServeMux, hosts *adminHosts) http.Handler {
	return console.Secured(hosts.guard(jsonapi.Errors(mux)))
}

// spanFlush bounds the export of the spans still queued at shutdown. It comes after the
// drains, in the few seconds a pod's grace period keeps beyond them for closing clients
// (deploy/k8s: shutdownMargin), so a collector that does not answer must not take them
// all: a span lost at shutdown costs no grab.
const spanFlush = 2 * time.Second

// traced is h with a server span per request (tracing.Handler: named after the route, the
// child of the caller's traceparent), except for the probes and the scrapes, which would
// be most of the traces and tell nothing. With tracing off it is h itself, so the grab
// path is served exactly as without tracing. The admin listener is traced too: its calls
// are few, and an operator's action (a preheat, a stock change) is then in the traces.
func traced(tr *tracing.Tracing, h http.Handler) http.Handler {
	return tr.Handler(h, "/healthz", "/readyz", "/metrics")
}

// ipBuckets limits per client the way the per-IP grab limit does (an IPv6 /64 is one client).
type ipBuckets struct{ l *ratelimit.Keyed }

func (b ipBuckets) Allow(addr string) (bool, time.Duration) { return b.l.Allow(clientip.Bucket(addr)) }

// consoleSecret keys the console's session cookies: SECKILL_CONSOLE_SECRET; else derived
// from SECKILL_ADMIN_TOKEN (as before named credentials, so sessions survive restarts and
// hold across gateways that share it); else random, so sessions end at a restart and hold on
// this gateway only. Never the token hashes of the credentials file: whoever can read that
// file could then sign sessions.
func consoleSecret(cfg config.Gateway, log *slog.Logger) ([]byte, error) {
	switch {
	case cfg.ConsoleSecret != "":
		return []byte(cfg.ConsoleSecret), nil
	case cfg.AdminToken != "":
		m := hmac.New(sha256.New, []byte(cfg.AdminToken))
		m.Write([]byte("seckill console secret v1"))
		return m.Sum(nil), nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("console secret: %w", err)
	}
	log.Warn("SECKILL_CONSOLE_SECRET is not set: console sessions end when this gateway restarts and hold on this gateway only")
	return b, nil
}

// gatewayID names this process among the gateways: host, pid and a random part (a restarted
// gateway is a new one; the old one's heartbeat stops).
func gatewayID() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "gateway"
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("gateway id: %w", err)
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b)), nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// replicaWaitFor decides at start whether grabs whose produce failed wait for a Redis
// replica (SECKILL_GATEWAY_REPLICA_WAIT): off when set to 0, and off, with a warning, when
// the Redis has no replica at all (a single server, as in the local single profile): there a
// WAIT could never succeed, and every such grab would wait in vain and be answered 503. A
// cluster counts its configured replicas, failed ones included, so a replica down at start
// does not turn the wait off; a single server knows only its connected replicas, so one added
// later needs a gateway restart.
func replicaWaitFor(ctx context.Context, rdb redis.UniversalClient, gate *stock.Gate, wait time.Duration, log *slog.Logger) (grab.ReplicaWaiter, error) {
	if wait == 0 {
		return nil, nil
	}
	has, err := stock.HasReplicas(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_GATEWAY_REPLICA_WAIT: %w", err)
	}
	if !has {
		log.Warn("Redis has no replica: grabs whose produce fails are answered 202 without a replica's copy of the reservation",
			"replica_wait", wait.String())
		return nil, nil
	}
	return gate, nil
}

func replicaWaitLabel(r grab.ReplicaWaiter, wait time.Duration) string {
	if r == nil {
		return "off"
	}
	return wait.String()
}
