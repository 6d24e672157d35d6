package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/load"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// scenario is one row of results.json.
type scenario struct {
	Name         string             `json:"name"`
	ThroughputPS float64            `json:"throughput_per_s"`
	P50ms        float64            `json:"p50_ms"`
	P99ms        float64            `json:"p99_ms"`
	P999ms       float64            `json:"p999_ms,omitempty"`
	Oversold     int64              `json:"oversold"`
	Ratios       map[string]float64 `json:"ratios"`
	Extra        map[string]any     `json:"extra,omitempty"`
}

type report struct {
	Machine   map[string]string `json:"machine"`
	Scenarios []*scenario       `json:"scenarios"`
	DurationS float64           `json:"duration_s"`
}

type bench struct {
	only   string // comma-separated steps to run ("" = all)
	out    io.Writer
	quick  bool
	binlog bool
	bin    string
	env    func(string) string
	client *http.Client
}

func newBench(ctx context.Context, out io.Writer, quick, binlog bool) (*bench, error) {
	bin, err := os.MkdirTemp("", "seckill-bench-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "building the deployables")
	if err := harness.Build(bin); err != nil {
		return nil, err
	}
	hot := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/hotrow")
	hot.Dir = harness.Root()
	if o, err := hot.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build hotrow: %v\n%s", err, o)
	}
	return &bench{out: out, quick: quick, binlog: binlog, bin: bin, env: os.Getenv,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048}}}, nil
}

func (b *bench) close() { os.RemoveAll(b.bin) }

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

// n scales request counts down for -quick.
func (b *bench) n(full int) int {
	if b.quick {
		return max(full/10, 500)
	}
	return full
}

func (b *bench) all(ctx context.Context) (report, error) {
	rep := report{Machine: machine(ctx)}
	steps := []struct {
		name string
		run  func(context.Context, *report) error
	}{{"ceiling", b.ceiling}, {"gateway", b.trivialAndGateway}, {"strategies", b.strategies}, {"persistence", b.persistence}}
	for _, step := range steps {
		if b.only != "" && !strings.Contains(b.only, step.name) {
			continue
		}
		if err := step.run(ctx, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func machine(ctx context.Context) map[string]string {
	run := func(name string, args ...string) string {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(out))
	}
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return map[string]string{
		"cores":   strconv.Itoa(runtime.NumCPU()),
		"cpu":     model,
		"memory":  run("sh", "-c", "free -h | awk '/Mem:/{print $2}'"),
		"os":      run("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
		"go":      runtime.Version(),
		"redis":   run("redis-server", "--version"),
		"mariadb": run("mariadbd", "--version"),
		"kafka":   "Apache Kafka 4.4.0 (KRaft, single broker)",
		"commit":  run("git", "-C", harness.Root(), "rev-parse", "--short", "HEAD"),
		"date":    time.Now().UTC().Format(time.RFC3339),
		"note":    "load generator, servers and services share the same cores, loopback only",
	}
}

func fromSummary(name string, s load.Summary) *scenario {
	return &scenario{Name: name, ThroughputPS: s.ThroughputPS, P50ms: s.P50ms, P99ms: s.P99ms, P999ms: s.P999ms,
		Ratios: map[string]float64{}, Extra: map[string]any{"requests": s.Requests, "errors": s.Errors, "codes": s.Codes, "mode": s.Mode}}
}

// ---------------------------------------------------------------- ceiling

const ceilingName = "ceiling: Lua EVALSHA straight at Redis (unpipelined)"

// find returns the scenario called name, or nil when that step did not run.
func (r *report) find(name string) *scenario {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

const concurrency = 256

func (b *bench) ceiling(ctx context.Context, rep *report) error {
	b.logf("== ceiling: the grab script straight at Redis")
	rdb, err := stock.Connect(ctx, envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), "", time.Second)
	if err != nil {
		return err
	}
	defer rdb.Close()
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		return err
	}
	sid := 3_000_000_000 + time.Now().UnixNano()%1_000_000
	st := seckill.Stock{SessionID: sid, PrizeID: 1, Total: 100_000_000, Left: 100_000_000, PerUserLimit: 1}
	if _, err := gate.Load(ctx, []seckill.Stock{st}, time.Now().Add(time.Hour)); err != nil {
		return err
	}
	k := stock.KeysFor(sid, 1)
	defer rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes)
	now := time.Now()
	s := load.Run(ctx, load.Options{Requests: b.n(200_000), Concurrency: concurrency}, func(ctx context.Context, i int) (int, error) {
		v, err := gate.Reserve(ctx, seckill.Grab{RequestID: seckill.RequestID(sid, 1, fmt.Sprintf("ceil-%010d", i)),
			UserID: "u" + strconv.Itoa(i), SessionID: sid, PrizeID: 1, AdmittedAt: now})
		return int(v.Code), err
	})
	sc := fromSummary(ceilingName, s)
	sc.Oversold = 0
	b.logf("  %s", s)
	rep.Scenarios = append(rep.Scenarios, sc)
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ---------------------------------------------------------------- trivial and gateway

// httpGrab returns a load.Request posting to url(i) with user i's token and key i.
func (b *bench) httpGrab(url func(i int) string, token func(i int) string, keyPrefix string) load.Request {
	return func(ctx context.Context, i int) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url(i), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token(i))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%08d", keyPrefix, i))
		resp, err := b.client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
}

type procStat struct {
	cpu time.Duration
	hwm int64 // peak RSS, bytes
}

func readProc(pid int) procStat {
	var st procStat
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name (which may hold spaces) start after ") ".
		f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
		if len(f) > 12 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			stt, _ := strconv.ParseInt(f[12], 10, 64)
			st.cpu = time.Duration(ut+stt) * 10 * time.Millisecond // USER_HZ is 100 on Linux
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
				st.hwm = kb << 10
			}
		}
	}
	return st
}

func (b *bench) startStrategyServer(ctx context.Context, c *harness.Cluster) (*harness.Proc, string, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	p, err := harness.Start("strategies", self, map[string]string{"SECKILL_JWT_SECRET": c.Env["SECKILL_JWT_SECRET"]},
		"-serve", "strategies", "-addr", addr, "-dsn", c.DSN, "-redis", envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr))
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			return nil, "", fmt.Errorf("strategy server did not start:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, base, nil
}

func (b *bench) trivialAndGateway(ctx context.Context, rep *report) error {
	b.logf("== trivial handler and gateway")
	// Admission alone: the gateway with Redis and Kafka; the consumers are measured below.
	c, err := harness.NewCluster(ctx, harness.Options{Bin: b.bin, Stocks: []int{9_000_000}, Limit: 1, Consumers: 0,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0", "SECKILL_MAX_INFLIGHT": "100000"}})
	if err != nil {
		return err
	}
	defer c.Close()
	// Without consumers every admission stays a reservation; the reconciler would spend the
	// run re-checking them. Admission alone is measured here.
	_ = c.Reconciler.Stop(10 * time.Second)
	srv, base, err := b.startStrategyServer(ctx, c)
	if err != nil {
		return err
	}
	defer srv.Kill()
	users := b.n(400_000)
	tokens := make([]string, users)
	for i := range tokens {
		if tokens[i], err = c.Token("bench-" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	token := func(i int) string { return tokens[i%users] }

	trivial := load.Run(ctx, load.Options{Requests: b.n(150_000), Concurrency: concurrency},
		b.httpGrab(func(int) string { return base + "/trivial" }, token, "triv"))
	b.logf("  trivial: %s", trivial)
	ts := fromSummary("trivial net/http handler (same generator)", trivial)
	rep.Scenarios = append(rep.Scenarios, ts)

	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	offset := 0
	best := load.Summary{}
	var cpuPer1000 float64
	for _, conc := range []int{64, 256, 768} {
		n := b.n(100_000)
		before := readProc(c.Gateway.Pid())
		s := load.Run(ctx, load.Options{Requests: n, Concurrency: conc},
			b.httpGrab(func(int) string { return grabURL }, func(i int) string { return token(i + offset) }, fmt.Sprintf("gw%d", conc)))
		after := readProc(c.Gateway.Pid())
		offset += n
		b.logf("  gateway closed loop, concurrency %d: %s", conc, s)
		if s.ThroughputPS > best.ThroughputPS {
			best = s
			cpuPer1000 = (after.cpu - before.cpu).Seconds() / (float64(s.Codes["202"]) / 1000)
		}
	}
	gs := fromSummary("gateway: grabs/s, closed loop (best concurrency)", best)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	gs.Ratios["gateway_over_trivial_handler"] = ratio(best.ThroughputPS, trivial.ThroughputPS)
	// The ceiling row exists only when the ceiling step ran (not under -only gateway).
	if ceil := rep.find(ceilingName); ceil != nil {
		gs.Ratios["gateway_over_redis_ceiling"] = ratio(best.ThroughputPS, ceil.ThroughputPS)
	}
	gs.Extra["cpu_seconds_per_1000_grabs"] = cpuPer1000

	half := best.ThroughputPS / 2
	open := load.Run(ctx, load.Options{Requests: int(half * 15), Concurrency: 4096, Rate: half},
		b.httpGrab(func(int) string { return grabURL }, func(i int) string { return token(i + offset) }, "open"))
	b.logf("  gateway open loop at %.0f/s: %s", half, open)
	lat := fromSummary(fmt.Sprintf("gateway: latency at 50%% of max (%.0f/s, open loop)", half), open)
	peak := readProc(c.Gateway.Pid()).hwm
	lat.Extra["gateway_peak_rss_mb"] = float64(peak) / (1 << 20)
	gs.Extra["gateway_peak_rss_mb"] = float64(peak) / (1 << 20)
	rep.Scenarios = append(rep.Scenarios, gs, lat)
	return nil
}

// ---------------------------------------------------------------- strategies

func (b *bench) strategies(ctx context.Context, rep *report) error {
	b.logf("== strategies on one hot item: same stock, same crowd, same HTTP front")
	const stockN = 2000
	requests := b.n(20_000)
	c, err := harness.NewCluster(ctx, harness.Options{Bin: b.bin, Stocks: []int{stockN}, Limit: 1, Consumers: 2,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0"}})
	if err != nil {
		return err
	}
	defer c.Close()
	srv, base, err := b.startStrategyServer(ctx, c)
	if err != nil {
		return err
	}
	defer srv.Kill()
	tokens := make([]string, requests)
	for i := range tokens {
		if tokens[i], err = c.Token("crowd-" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	token := func(i int) string { return tokens[i%requests] }

	// (a) the pipeline, consumers included: oversold is counted in MySQL after the drain.
	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	pa := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency},
		b.httpGrab(func(int) string { return grabURL }, token, "pipe"))
	if err := c.Drain(ctx, 60*time.Second); err != nil {
		return err
	}
	var sold int64
	if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'").Scan(&sold).Error; err != nil {
		return fmt.Errorf("count sold orders (a failed count must not read as 'oversold 0'): %w", err)
	}
	sa := fromSummary("strategy (a): this pipeline (Lua + Kafka + batched consumer)", pa)
	sa.Oversold = max(0, sold-stockN)
	sa.Extra["sold"] = sold
	b.logf("  (a) pipeline: %s; sold %d", pa, sold)

	type strat struct {
		name, path string
		sold       func(strategyStats) int64
	}
	var rows []*scenario
	for _, s := range []strat{
		{"strategy (b): Redis lock (SET NX PX + compare-and-delete) around read-check-decrement", "/lock", func(s strategyStats) int64 { return s.LockSold }},
		{"strategy (c): DB optimistic lock per request, tiered retries", "/optimistic", func(s strategyStats) int64 { return s.OptimisticSold }},
		{"strategy (d): DB pessimistic SELECT … FOR UPDATE", "/pessimistic", func(s strategyStats) int64 { return s.PessimisticSold }},
	} {
		if err := resetStrategies(ctx, base, stockN); err != nil {
			return err
		}
		// The slow strategies would take minutes for the whole crowd: each gets 40 s, and its
		// throughput is what it served in that time.
		r := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency, MaxDuration: 40 * time.Second},
			b.httpGrab(func(int) string { return base + s.path }, token, "strat"))
		st, err := fetchStats(ctx, base)
		if err != nil {
			return err
		}
		sc := fromSummary(s.name, r)
		sc.Oversold = max(0, s.sold(st)-stockN)
		sc.Extra["sold"] = s.sold(st)
		if s.path == "/optimistic" {
			sc.Extra["conflict_rate"] = float64(st.Conflicts) / float64(max(1, st.Attempts))
		}
		b.logf("  %s: %s; sold %d", s.path, r, s.sold(st))
		rows = append(rows, sc)
	}
	sa.Ratios["pipeline_over_redis_lock"] = sa.ThroughputPS / max(1, rows[0].ThroughputPS)
	sa.Ratios["pipeline_over_db_optimistic"] = sa.ThroughputPS / max(1, rows[1].ThroughputPS)
	sa.Ratios["pipeline_over_db_pessimistic"] = sa.ThroughputPS / max(1, rows[2].ThroughputPS)
	rep.Scenarios = append(rep.Scenarios, sa)
	rep.Scenarios = append(rep.Scenarios, rows...)

	// (c) at 1,000 concurrent clients, with and without retries.
	for _, retries := range []int{0, 9} {
		if err := resetStrategies(ctx, base, stockN); err != nil {
			return err
		}
		r := load.Run(ctx, load.Options{Requests: requests, Concurrency: 1000, MaxDuration: 40 * time.Second},
			b.httpGrab(func(int) string { return fmt.Sprintf("%s/optimistic?retries=%d", base, retries) }, token, "occ"))
		st, err := fetchStats(ctx, base)
		if err != nil {
			return err
		}
		label := "without retries"
		if retries > 0 {
			label = "with tiered retries"
		}
		sc := fromSummary(fmt.Sprintf("strategy (c) at 1,000 clients, %s", label), r)
		sc.Oversold = max(0, st.OptimisticSold-stockN)
		sc.Extra["sold"] = st.OptimisticSold
		sc.Extra["attempt_conflict_rate"] = float64(st.Conflicts) / float64(max(1, st.Attempts))
		sc.Extra["requests_failed_on_conflict_rate"] = float64(st.GaveUp) / float64(max(1, r.Requests))
		b.logf("  optimistic, 1000 clients, retries=%d: %s; attempts %d, conflicts %d, gave up %d", retries, r, st.Attempts, st.Conflicts, st.GaveUp)
		rep.Scenarios = append(rep.Scenarios, sc)
	}
	return nil
}

// ---------------------------------------------------------------- persistence

type hotRow struct {
	Mode      string  `json:"mode"`
	Orders    int     `json:"orders"`
	PerSecond float64 `json:"orders_per_s"`
}

func (b *bench) hotrow(ctx context.Context, orders int) ([]hotRow, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, "hotrow"), "-json", "-orders", strconv.Itoa(orders), "-batch", "500")
	cmd.Env = os.Environ()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hotrow: %v", err)
	}
	var rows []hotRow
	return rows, json.Unmarshal(out, &rows)
}

func (b *bench) persistence(ctx context.Context, rep *report) error {
	b.logf("== persistence into one hot row")
	modes := []string{"as configured"}
	if b.binlog {
		modes = append(modes, "binlog + sync_binlog=1")
	}
	for _, mode := range modes {
		if mode != "as configured" {
			if err := restartMariaDB(ctx, b.out, "1"); err != nil {
				return err
			}
		}
		rows, err := b.hotrow(ctx, b.n(10_000))
		if err != nil {
			return err
		}
		sc := &scenario{Name: "persistence, one hot row, batched (500/tx) vs one tx per order (" + mode + ")",
			ThroughputPS: rows[0].PerSecond, Ratios: map[string]float64{"batched_over_one_update_per_order": rows[0].PerSecond / rows[1].PerSecond},
			Extra: map[string]any{"one_tx_per_order_per_s": rows[1].PerSecond}}
		b.logf("  %s: batched %.0f/s, per order %.0f/s", mode, rows[0].PerSecond, rows[1].PerSecond)
		rep.Scenarios = append(rep.Scenarios, sc)
		k, err := b.kafkaToMySQL(ctx, mode)
		if err != nil {
			return err
		}
		rep.Scenarios = append(rep.Scenarios, k)
	}
	if b.binlog {
		if err := restartMariaDB(ctx, b.out, "0"); err != nil {
			return err
		}
	}
	s, err := b.lastAdmissionToLastOrder(ctx)
	if err != nil {
		return err
	}
	rep.Scenarios = append(rep.Scenarios, s)
	return nil
}

// restartMariaDB restarts the stack's MariaDB with or without the binary log.
func restartMariaDB(ctx context.Context, out io.Writer, binlog string) error {
	srv := harness.LocalServers()
	if err := srv.Signal("mariadb", syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := srv.Signal("mariadb", 0); err != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadb did not stop")
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Setenv("SECKILL_MYSQL_BINLOG", binlog)
	defer os.Unsetenv("SECKILL_MYSQL_BINLOG")
	return srv.Up(ctx, nil)
}

// kafkaToMySQL preloads the grab topic with one hot prize's events, then starts one
// consumer and measures orders/s from the first order committed to the last.
func (b *bench) kafkaToMySQL(ctx context.Context, mode string) (*scenario, error) {
	n := b.n(40_000)
	c, err := harness.NewCluster(ctx, harness.Options{Bin: b.bin, Stocks: []int{n}, Limit: 1, Consumers: 0})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w, err := event.NewWriter(c.Brokers, c.Topics.Grab.Name)
	if err != nil {
		return nil, err
	}
	w.BatchSize = 5000
	now := time.Now().UTC()
	for i := 0; i < n; i += 5000 {
		msgs := make([]kafka.Message, 0, 5000)
		for j := i; j < min(i+5000, n); j++ {
			m, err := event.EncodeGrab(seckill.Grab{RequestID: seckill.RequestID(c.Session.ID, c.Prizes[0].ID, fmt.Sprintf("pre-%08d", j)),
				UserID: "u" + strconv.Itoa(j), SessionID: c.Session.ID, PrizeID: c.Prizes[0].ID, AdmittedAt: now})
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return nil, err
		}
	}
	w.Close()
	start := time.Now()
	p, err := harness.Start("consumer", filepath.Join(b.bin, "consumer"), map[string]string{
		"SECKILL_MYSQL_DSN": c.DSN, "SECKILL_TOPIC_PREFIX": c.Env["SECKILL_TOPIC_PREFIX"], "SECKILL_CONSUMER_GROUP": c.Env["SECKILL_CONSUMER_GROUP"],
		"SECKILL_CONSUMER_ADDR": "127.0.0.1:0", "SECKILL_BATCH_SIZE": "500", "SECKILL_LOG_LEVEL": "warn"})
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	var done int64
	for done < int64(n) {
		if time.Since(start) > 3*time.Minute || p.Exited() {
			return nil, fmt.Errorf("consumer persisted %d of %d:\n%s", done, n, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders").Scan(&done).Error; err != nil {
			return nil, fmt.Errorf("count persisted orders: %w", err)
		}
	}
	var span struct{ First, Last time.Time }
	if err := c.DB.Raw("SELECT MIN(created_at) AS first, MAX(created_at) AS last FROM orders").Scan(&span).Error; err != nil {
		return nil, fmt.Errorf("read the persistence span: %w", err)
	}
	secs := span.Last.Sub(span.First).Seconds()
	rate := float64(n) / max(secs, 0.001)
	b.logf("  kafka → mysql (%s): %d orders in %.2fs = %.0f orders/s", mode, n, secs, rate)
	return &scenario{Name: "persistence, Kafka → MySQL, one hot prize, consumer (" + mode + ")", ThroughputPS: rate,
		Ratios: map[string]float64{}, Extra: map[string]any{"orders": n, "seconds": secs}}, nil
}

// lastAdmissionToLastOrder runs a 10,000-stock sale through the whole pipeline and measures
// the time from the last admission to the last order committed in MySQL.
func (b *bench) lastAdmissionToLastOrder(ctx context.Context) (*scenario, error) {
	b.logf("== 10,000-stock sale: last admission to last order")
	stockN := 10_000
	if b.quick {
		stockN = 1000
	}
	c, err := harness.NewCluster(ctx, harness.Options{Bin: b.bin, Stocks: []int{stockN}, Limit: 1, Consumers: 2,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	requests := stockN * 12 / 10
	tokens := make([]string, requests)
	for i := range tokens {
		if tokens[i], err = c.Token("sale-" + strconv.Itoa(i)); err != nil {
			return nil, err
		}
	}
	url := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	s := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency},
		b.httpGrab(func(int) string { return url }, func(i int) string { return tokens[i] }, "sale"))
	deadline := time.Now().Add(2 * time.Minute)
	var sold int64
	for sold < int64(stockN) && time.Now().Before(deadline) {
		if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'").Scan(&sold).Error; err != nil {
			return nil, fmt.Errorf("count sold orders (a failed count must not read as 'oversold 0'): %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var span struct{ LastAdmitted, LastCreated time.Time }
	if err := c.DB.Raw("SELECT MAX(admitted_at) AS last_admitted, MAX(created_at) AS last_created FROM orders").Scan(&span).Error; err != nil {
		return nil, fmt.Errorf("read the sale's span: %w", err)
	}
	lag := span.LastCreated.Sub(span.LastAdmitted).Seconds()
	b.logf("  %s; sold %d; last order %.3fs after the last admission", s, sold, lag)
	sc := fromSummary(fmt.Sprintf("%d-stock sale through the whole pipeline", stockN), s)
	sc.Oversold = max(0, sold-int64(stockN))
	sc.Extra["sold"] = sold
	sc.Extra["last_admission_to_last_order_s"] = lag
	return sc, nil
}
