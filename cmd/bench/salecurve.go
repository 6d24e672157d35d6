package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/load"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// What latency does a client see while a sale runs? The gateway step measures admission
// alone (no consumer, no reconciler); in a sale the consumers persist every admitted grab
// on the same machines at the same time. This step runs the whole pipeline: gateway,
// consumers and reconciler on their shipped settings, a stock no crowd here can sell out
// (every grab is admitted and persisted, so the sold-out answer never shortcuts the work),
// finds the closed-loop maximum with all of them running, then offers 10, 25, 50, 75 and
// 90 % of THAT maximum in an open loop, timed from the schedule. Around every window it
// scrapes the gateway's and the consumers' histograms for the per-stage breakdown, and
// after every window it waits until every grab Redis admitted is an order in MySQL, so a
// window never inherits the one before's backlog; the wait is reported. The last check is
// an invariant: admitted minus orders must be 0, and a count that cannot be read, or is
// not 0, fails the run.

// curveConsumers is how many consumers the single-node shapes ship (docker-compose.yml and
// the single-node overlay run one consumer and one reconciler on one machine, as the bench
// does). With one hot prize only one consumer would work in any case: its events are on
// one partition.
const curveConsumers = 1

// curveStock is more than every window of the step can admit together.
const curveStock = 9_000_000

// persistWait bounds the wait for the orders of one window.
const persistWait = 3 * time.Minute

// harnessTestEnv are the harness's speed-ups for tests (shorter batches waits, reconcile
// periods, stale ages and leases); the sale curve runs the shipped defaults instead.
var harnessTestEnv = []string{"SECKILL_BATCH_WAIT", "SECKILL_STALE_AFTER", "SECKILL_RECONCILE_INTERVAL",
	"SECKILL_CATCHUP_WAIT", "SECKILL_LEASE_TTL"}

func shippedEnv(env map[string]string) map[string]string {
	out := maps.Clone(env)
	for _, k := range harnessTestEnv {
		delete(out, k)
	}
	return out
}

func keySaleOpen(pct int) string { return fmt.Sprintf("salecurve_open_%d", pct) }

const keySaleMax = "salecurve_max"

// persistedCheck is the step's invariant: every grab Redis admitted became an order. It
// returns admitted minus orders, and an error when either count could not be read (a
// failed count must not read as 0) or the difference is not 0.
func persistedCheck(admitted, orders int64, readErr error) (int64, error) {
	if readErr != nil {
		return 0, fmt.Errorf("admitted grabs without an order: cannot be read: %w", readErr)
	}
	if d := admitted - orders; d != 0 {
		return d, fmt.Errorf("admitted grabs without an order: %d (Redis admitted %d, MySQL has %d orders)", d, admitted, orders)
	}
	return 0, nil
}

func (b *bench) saleCurve(ctx context.Context, rep int) ([]measured, error) {
	c, adminAddr, done, err := b.curvePipeline(ctx, curveStock)
	if err != nil {
		return nil, err
	}
	defer done()
	consumerURLs, err := b.shippedServices(ctx, c)
	if err != nil {
		return nil, err
	}
	gatewayURL, adminToken := "http://"+adminAddr+"/metrics", c.Env["SECKILL_ADMIN_TOKEN"]
	scrapeAll := func() ([]series, error) {
		all, err := scrape(ctx, gatewayURL, adminToken)
		if err != nil {
			return nil, err
		}
		for _, u := range consumerURLs {
			ss, err := scrape(ctx, u, "")
			if err != nil {
				return nil, err
			}
			all = append(all, ss...)
		}
		return all, nil
	}

	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	url := func(int) string { return grabURL }
	if err := b.warmUp(ctx, c, grabURL); err != nil {
		return nil, err
	}
	procs, err := b.pipelineProcs(c)
	if err != nil {
		return nil, err
	}
	id := seckill.SessionPrize{Session: c.Session.ID, Prize: c.Prizes[0].ID}
	// persisted waits until every grab Redis admitted so far is an order, and says how long
	// that took after the window closed.
	persisted := func() (lag float64, err error) {
		start := time.Now()
		admitted, orders, err := b.waitOrders(ctx, c, id, persistWait)
		if _, err := persistedCheck(admitted, orders, err); err != nil {
			return 0, err
		}
		return time.Since(start).Seconds(), nil
	}

	next := b.userFeed()

	ms, err := b.pipelineMax(ctx, url, next, "pc", procs, persisted)
	if err != nil {
		return nil, err
	}
	out := []measured{{keySaleMax, fmt.Sprintf("pipeline (gateway + %d consumer + reconciler persisting every grab): grabs/s, closed loop (best of 64, 256, 768 clients)", curveConsumers), ms}}

	for _, pct := range openLevels {
		before, err := scrapeAll()
		if err != nil {
			return nil, err
		}
		sm, err := b.openLevel(ctx, pct, ms.ThroughputPS, url, next, "po")
		if err != nil {
			return nil, err
		}
		lag, err := persisted()
		if err != nil {
			return nil, fmt.Errorf("open loop at %d%%: %w", pct, err)
		}
		// After the orders: the consumers' histograms then hold every order of the window.
		after, err := scrapeAll()
		if err != nil {
			return nil, err
		}
		b.logf("  all persisted %.2fs after", lag)
		sm.Extra["persist_lag_s"] = lag
		if err := stageExtras(append(gatewayStages(), consumerStages()...), before, after, sm.Extra); err != nil {
			return nil, err
		}
		out = append(out, measured{keySaleOpen(pct), fmt.Sprintf("pipeline: open loop at %d%% of its max", pct), sm})
		if err := pause(ctx, time.Second); err != nil {
			return out, err
		}
	}

	// The invariant, once more over the whole step (the warm-up grab included): a figure
	// that cannot be read, or is not 0, fails the run, and the rows say which.
	admitted, orders, err := b.countOrders(ctx, c, id)
	diff, cerr := persistedCheck(admitted, orders, err)
	for _, m := range out {
		m.s.Extra["not_persisted"] = diff
		m.s.Oversold = max(0, orders-curveStock)
	}
	return out, cerr
}

// shippedServices replaces the harness's reconciler (test settings) with one on the shipped
// settings and starts curveConsumers consumers on them; it returns their /metrics URLs.
// c.Close stops them all.
func (b *bench) shippedServices(ctx context.Context, c *harness.Pipeline) ([]string, error) {
	if err := c.Reconciler.Stop(10 * time.Second); err != nil {
		return nil, fmt.Errorf("stop the harness's reconciler: %w", err)
	}
	shipped := shippedEnv(c.Env)
	recAddr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	recEnv := maps.Clone(shipped)
	recEnv["SECKILL_RECONCILER_ADDR"] = recAddr
	rec, err := harness.Start("reconciler", filepath.Join(b.bin, "reconciler"), recEnv)
	if err != nil {
		return nil, err
	}
	c.Reconciler, c.Reconcilers = rec, []*harness.Proc{rec} // c.Close stops it
	if err := waitHTTP(ctx, rec, "http://"+recAddr+"/healthz", 30*time.Second); err != nil {
		return nil, err
	}
	return b.startConsumers(ctx, c, curveConsumers, shipped)
}

// pipelineMax is the whole pipeline's closed-loop maximum: one window of fresh users per
// client count of gatewayConcurrencies, each window's CPU read after persisted (its orders
// committed), and the best window's sample with its concurrency, persistence lag and CPU
// per grab.
func (b *bench) pipelineMax(ctx context.Context, url func(int) string, next feed, keyPrefix string, procs []cpuProc,
	persisted func() (float64, error)) (*sample, error) {
	var best load.Summary
	var bestConc int
	var bestCPU map[string]float64
	var bestLag float64
	for _, conc := range gatewayConcurrencies {
		// The window's CPU includes persisting its grabs: the orders first, then the CPU.
		var lag float64
		s, per, err := b.closedWindow(ctx, conc, url, next, keyPrefix, procs, func() (err error) {
			lag, err = persisted()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("closed loop at %d clients: %w", conc, err)
		}
		b.logf("  pipeline closed loop, concurrency %d: %s; all persisted %.2fs after; CPU µs/grab: %s", conc, s, lag, cpuAll(per))
		// The maximum is of grabs admitted: a gateway that refuses part of a closed loop
		// (503 overloaded) answers faster, and those answers are not grabs.
		if admittedPS(s) > admittedPS(best) {
			best, bestConc, bestCPU, bestLag = s, conc, per, lag
		}
	}
	if admittedPS(best) == 0 {
		return nil, fmt.Errorf("the pipeline admitted nothing in the closed loop")
	}
	ms := sampleFrom(best)
	ms.ThroughputPS = admittedPS(best)
	ms.Extra["answers_per_s"] = best.ThroughputPS
	ms.Extra["concurrency"] = bestConc
	ms.Extra["persist_lag_s"] = bestLag
	maps.Copy(ms.Extra, anyMap(bestCPU))
	return ms, nil
}

// admittedPS is a closed loop's 202 answers per second.
func admittedPS(s load.Summary) float64 {
	if s.Requests == 0 {
		return 0
	}
	return s.ThroughputPS * float64(s.Codes["202"]) / float64(s.Requests)
}

// cpuAll lists every process's CPU per grab, sorted by name, for the log.
func cpuAll(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.TrimPrefix(k, "cpu_us_per_grab_"), m[k]))
	}
	return strings.Join(parts, ", ")
}

func anyMap(m map[string]float64) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// countOrders reads how many grabs Redis admitted for id (stock minus what is left) and
// how many orders MySQL holds for it.
func (b *bench) countOrders(ctx context.Context, c *harness.Pipeline, id seckill.SessionPrize) (admitted, orders int64, err error) {
	snaps, err := c.Gate.Snapshots(ctx, []seckill.SessionPrize{id})
	if err != nil {
		return 0, 0, fmt.Errorf("read Redis's stock: %w", err)
	}
	if len(snaps) != 1 || !snaps[0].Loaded {
		return 0, 0, fmt.Errorf("read Redis's stock: the prize is not loaded")
	}
	admitted = snaps[0].Total - snaps[0].Left
	if err := c.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE session_id = ? AND prize_id = ? AND status = 'succeeded'",
		id.Session, id.Prize).Scan(&orders).Error; err != nil {
		return 0, 0, fmt.Errorf("count orders: %w", err)
	}
	return admitted, orders, nil
}

// waitOrders polls countOrders until the orders catch up with the admissions or d passes,
// and returns the last counts. It polls between measured windows only.
func (b *bench) waitOrders(ctx context.Context, c *harness.Pipeline, id seckill.SessionPrize, d time.Duration) (admitted, orders int64, err error) {
	deadline := time.Now().Add(d)
	for {
		admitted, orders, err = b.countOrders(ctx, c, id)
		if err != nil || orders >= admitted || time.Now().After(deadline) {
			return admitted, orders, err
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return admitted, orders, err
		}
	}
}

// startConsumers starts n consumers with env and returns their /metrics URLs; c.Close
// stops them with the rest. They are started here rather than by the harness so their
// metrics addresses are known.
func (b *bench) startConsumers(ctx context.Context, c *harness.Pipeline, n int, env map[string]string) ([]string, error) {
	var urls []string
	for range n {
		addr, err := harness.FreeAddr()
		if err != nil {
			return nil, err
		}
		e := maps.Clone(env)
		e["SECKILL_CONSUMER_ADDR"] = addr
		p, err := harness.Start("consumer", filepath.Join(b.bin, "consumer"), e)
		if err != nil {
			return nil, err
		}
		c.Consumers = append(c.Consumers, p)
		if err := waitHTTP(ctx, p, "http://"+addr+"/healthz", 30*time.Second); err != nil {
			return nil, err
		}
		urls = append(urls, "http://"+addr+"/metrics")
	}
	return urls, nil
}

// pipelineProcs are the processes whose CPU the pipeline's closed loop accounts for: the
// services, the load generator, and the servers found by their listening sockets.
func (b *bench) pipelineProcs(c *harness.Pipeline) ([]cpuProc, error) {
	procs := b.cpuProcs(c.Gateway.Pid(), envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), c.Brokers)
	var consumers []int
	for _, p := range c.Consumers {
		consumers = append(consumers, p.Pid())
	}
	procs = append(procs, cpuProc{"consumer", consumers}, cpuProc{"reconciler", []int{c.Reconciler.Pid()}})
	if p, ok, err := b.mariadbProc(c.DSN); err != nil {
		return nil, err
	} else if ok {
		procs = append(procs, p)
	}
	return procs, nil
}

// mariadbProc finds the MySQL server of dsn by its listening socket; ok is false (and the
// log says so) when it runs elsewhere.
func (b *bench) mariadbProc(dsn string) (cpuProc, bool, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return cpuProc{}, false, err
	}
	p, ok := b.serverProc("mysql", []string{cfg.Addr})
	return p, ok, nil
}

// serverProc finds the processes listening on addrs; ok is false (and the log says so)
// when there are none here (a server in a container or on another machine): its CPU is
// then not measured, never a zero.
func (b *bench) serverProc(name string, addrs []string) (cpuProc, bool) {
	pids, err := listeners(addrs)
	if err != nil || len(pids) == 0 {
		b.logf("  CPU of %s not measured: no process found listening on %v (%v)", name, addrs, err)
		return cpuProc{}, false
	}
	return cpuProc{name, pids}, true
}
