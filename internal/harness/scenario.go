package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Crowd sizes; the short suite in `make test` uses a smaller one.
type Size struct {
	Requests    int
	Users       int
	Stocks      []int
	Concurrency int
}

// Full is the crowd of the chaos suite: 20,000 grabs from 5,000 users on three prizes.
var Full = Size{Requests: 20000, Users: 5000, Stocks: []int{100, 1000, 5000}, Concurrency: 64}

// Small is the crowd of the short suite.
var Small = Size{Requests: 6000, Users: 1500, Stocks: []int{50, 300, 1500}, Concurrency: 32}

// Scenario is one row of the failure matrix.
type Scenario struct {
	Name       string
	Short      bool    // part of `make test`
	Repeats    float64 // fraction of clicks that repeat an earlier click's key
	Consumers  int
	At         float64 // fraction of the crowd after which During starts
	GatewayEnv func(seed uint64) (map[string]string, func(), error)
	Before     func(ctx context.Context, e *Env) error
	During     func(ctx context.Context, e *Env) error

	// The sale's activity and pace, for the payment scenarios.
	PaymentTimeout    time.Duration
	RegrabAfterCancel bool
	ConsumerEnv       func(seed uint64) (map[string]string, func(), error)
	Rate              float64 // clicks per second (0: as fast as the crowd goes)
	// Pace, when Rate is 0, spreads the crowd over about this long whatever its size, for a
	// fault that needs the crowd still grabbing for a while in the short suite too.
	Pace time.Duration

	// Stock buckets (buckets.go): the middle prize split into Buckets buckets (0: none), and
	// the activity's per-user limit (0: 1).
	Buckets, Limit int

	// The cluster profile's fleet (clusterfaults.go): gateways behind HAProxy, reconcilers.
	Gateways, Reconcilers int
	NoProxy               bool // several gateways without HAProxy (Options.NoProxy)

	// RedisMayForget marks a fault that can make Redis forget writes it acknowledged (see
	// history.Header): the history's stock count then leaves the grabs the database refused
	// for want of stock to the design's last guard.
	RedisMayForget bool

	// OpensIn > 0: the sale opens under the crowd. The session opens this long after the
	// services are up (at least 2 s: their schedules reload every second); the crowd starts
	// one second before the open, and a click answered not_open presses again until it opens.
	OpensIn time.Duration
	// Concurrency, when > 0, replaces the size's client count (a crowd above the gateways'
	// admission limit).
	Concurrency int
	// Draw, when set, adds a prize given by a draw that a crowd of its own enters while the
	// row's crowd grabs the others (drawrow.go).
	Draw *DrawRow
}

// Env is what a scenario's hooks can act on.
type Env struct {
	Pipeline *Pipeline
	Servers  Servers
	Log      io.Writer
	Seed     uint64
	stop     chan struct{} // closed when the crowd finished
	// Attempts is every answer the crowd got (read it once CrowdDone is closed).
	Attempts *AttemptLog
	// Draw is the row's draw crowd (nil without Scenario.Draw).
	Draw *DrawCrowd
}

// CrowdDone is closed when the crowd has finished.
func (e *Env) CrowdDone() <-chan struct{} { return e.stop }

// Scenarios is the failure matrix of DESIGN.md.
func Scenarios() []Scenario {
	killGateway := func(ctx context.Context, e *Env) error {
		e.Pipeline.Gateway.Kill()
		return e.Pipeline.StartGateway(ctx)
	}
	killConsumer := func(i int) func(ctx context.Context, e *Env) error {
		return func(ctx context.Context, e *Env) error {
			n, err := awaitOrders(ctx, e, -1)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Log, "  consumer %d killed with %d orders committed\n", i, n)
			e.Pipeline.Consumers[i].Kill()
			return e.Pipeline.RestartConsumer(ctx, i)
		}
	}
	restart := func(name string) func(ctx context.Context, e *Env) error {
		return func(ctx context.Context, e *Env) error {
			if err := e.Servers.Kill(name); err != nil {
				return err
			}
			return e.Servers.Up(ctx, nil)
		}
	}
	return []Scenario{
		{Name: "happy path", Short: true, Repeats: 0.1, Consumers: 2},
		{Name: "repeat clicks and retries", Repeats: 0.4, Consumers: 2},
		{Name: "kill -9 gateway mid-crowd", Short: true, Repeats: 0.1, Consumers: 2, At: 0.4, During: killGateway},
		{Name: "kill -9 consumer mid-batch twice", Short: true, Repeats: 0.1, Consumers: 2, At: 0.3,
			During: func(ctx context.Context, e *Env) error {
				if err := killConsumer(0)(ctx, e); err != nil {
					return err
				}
				time.Sleep(700 * time.Millisecond)
				return killConsumer(1)(ctx, e)
			}},
		{Name: "kill -9 and restart Kafka", Repeats: 0.1, Consumers: 2, At: 0.4, During: restart("kafka")},
		{Name: "SIGSTOP Kafka for 10s", Repeats: 0.1, Consumers: 2, At: 0.4,
			During: func(ctx context.Context, e *Env) error {
				if err := e.Servers.Signal("kafka", syscall.SIGSTOP); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
				return e.Servers.Signal("kafka", syscall.SIGCONT)
			}},
		{Name: "kill -9 and restart Redis (AOF)", Repeats: 0.1, Consumers: 2, At: 0.4, During: restart("redis"), RedisMayForget: true},
		{Name: "Redis data loss (FLUSHALL)", Repeats: 0.1, Consumers: 2, At: 0.4, RedisMayForget: true,
			During: func(ctx context.Context, e *Env) error { return e.Pipeline.FlushAll(ctx) }},
		{Name: "kill -9 and restart MariaDB", Repeats: 0.1, Consumers: 2, At: 0.4, During: restart("mariadb")},
		{Name: "optimistic-lock conflict storm", Repeats: 0.1, Consumers: 2, At: 0.05,
			During: func(ctx context.Context, e *Env) error {
				// An extra writer bumps every stock row's version as fast as it can until the
				// crowd is over: consumers conflict, retry, compensate; the reconciler replays.
				for {
					select {
					case <-e.stop:
						return nil
					case <-ctx.Done():
						return nil
					default:
					}
					e.Pipeline.DB.Exec("UPDATE session_stocks SET version = version + 1 WHERE session_id = ?", e.Pipeline.Session.ID)
				}
			}},
		{Name: "drift injected into Redis", Short: true, Repeats: 0.1, Consumers: 2,
			Before: func(ctx context.Context, e *Env) error {
				// Redis too high on the first prize (more admitted than MySQL has), too low on
				// the second (less sold than there is).
				if err := e.Pipeline.AdjustRedisLeft(ctx, 0, 30); err != nil {
					return err
				}
				return e.Pipeline.AdjustRedisLeft(ctx, 1, -100)
			}},
		slowRedis(),
		// Unpaid and cancelled orders give their stock back (payment.go). The crowd is paced
		// (2,000 clicks/s, about 10 s) so returned units meet buyers while the session is open.
		{Name: "cancellation storm: 30% of winners cancel", Repeats: 0.1, Consumers: 2, At: 0.1, Rate: 2000,
			RegrabAfterCancel: true, During: cancellationStorm(0.3)},
		{Name: "paid and cancelled racing (payment timeout 2s)", Repeats: 0.1, Consumers: 2, At: 0.05, Rate: 2000,
			PaymentTimeout: 2 * time.Second, During: paidCancelledRace(2 * time.Second)},
		cutReturns(),
		{Name: "payment timeouts while Redis lost its keys", Repeats: 0.1, Consumers: 2, At: 0.05, Rate: 1500, RedisMayForget: true,
			PaymentTimeout: 2 * time.Second, During: timeoutsWhileKeysLost},
		{Name: "a fifth of the winners never pay (timeout 2s)", Repeats: 0.1, Consumers: 2, At: 0, Rate: 2000,
			PaymentTimeout: 2 * time.Second, During: neverPay(2 * time.Second)},
		rollingUpgrade(false),
		bucketCrowd(),
		bucketConsumersKilled(),
		bucketCancellationStorm(),
		bucketKeyLoss(),
		// Poison (issue 39): every kind a writer of a consumed topic can produce, mid-crowd, on
		// the partition of live orders; the valid message after it is applied within seconds.
		// The fair sale's draw (drawrow.go): a draw prize entered by its own crowd beside the
		// row's, the fault striking the draw.
		{Name: "draw: every reconciler killed mid-draw", Short: true, Repeats: 0.1, Consumers: 2, Reconcilers: 2,
			Draw: drawRow(), During: killReconcilersMidDraw},
		// Not in the short set: like the other server restarts of this matrix it restarts the
		// single profile's Redis (Servers), which the secure profile's short run must not
		// touch. The short sets kill the draw's Redis primary on the cluster profile instead.
		{Name: "draw: kill -9 and restart Redis during the entry window", Repeats: 0.1, Consumers: 2,
			RedisMayForget: true, Draw: drawRow(), During: inTheWindow(restart("redis"))},
		{Name: "poison on the grab topic mid-crowd", Short: true, Repeats: 0.1, Consumers: 2, At: 0.3, During: poisonOnGrabs},
		{Name: "poison on the feedback topic mid-crowd", Short: true, Repeats: 0.1, Consumers: 2, At: 0.3, During: poisonOnFeedback},
		{Name: "poison on the compensation topic mid-crowd", Repeats: 0.1, Consumers: 2, At: 0.3, During: poisonOnCompensation},
		{Name: "reconciler killed mid-run, two at once", Repeats: 0.1, Consumers: 2, At: 0.5,
			During: func(ctx context.Context, e *Env) error {
				second, err := e.Pipeline.StartReconciler(ctx)
				if err != nil {
					return err
				}
				time.Sleep(1500 * time.Millisecond)
				e.Pipeline.Reconciler.Kill()
				e.Pipeline.Reconciler = second
				return nil
			}},
	}
}

// cutReturns routes the consumers' Redis through a proxy that cuts them off mid-storm, so
// they die between a cancellation's commit and its Redis return.
func cutReturns() Scenario {
	var proxy *Proxy
	return Scenario{Name: "consumer killed between the DB commit and the Redis return", Repeats: 0.1, Consumers: 2,
		At: 0.05, Rate: 1000, RegrabAfterCancel: true, ConsumerEnv: consumerRedisProxy(&proxy),
		During: cutBetweenCommitAndReturn(&proxy)}
}

// slowRedis puts a proxy between the gateway and Redis that, during the crowd, holds back
// 3% of the replies past the gateway's 150 ms read timeout: go-redis retries the EVALSHA,
// and the script's idempotency must keep the stock deducted once.
func slowRedis() Scenario {
	var proxy *Proxy
	return Scenario{Name: "slow and lost Redis replies (go-redis retries)", Repeats: 0.1, Consumers: 2,
		GatewayEnv: func(seed uint64) (map[string]string, func(), error) {
			p, err := NewProxy(env("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), seed, 0.03, 400*time.Millisecond)
			if err != nil {
				return nil, nil, err
			}
			proxy = p
			return map[string]string{"SECKILL_REDIS_ADDR": p.Addr(), "SECKILL_REDIS_TIMEOUT": "150ms"}, func() { p.Close() }, nil
		},
		During: func(ctx context.Context, e *Env) error {
			proxy.Arm(true)
			<-e.CrowdDone()
			proxy.Arm(false)
			if proxy.Delayed() == 0 {
				return errors.New("the proxy delayed no reply: the scenario tested nothing")
			}
			fmt.Fprintf(e.Log, "  proxy held back %d replies past the read timeout\n", proxy.Delayed())
			return nil
		}}
}

// Run runs one scenario end to end and returns its row; the error is for the harness
// itself failing (not an invariant).
// The row's history (and a violation's visualization) is written under artifacts, unless
// it is empty.
func Run(ctx context.Context, sc Scenario, seed uint64, size Size, bin, artifacts string, log io.Writer) (Result, error) {
	res := Result{Scenario: sc.Name, Seed: seed}
	start := time.Now()
	limit := 150 * time.Second
	if sc.Gateways > 1 && !sc.NoProxy {
		limit = 240 * time.Second // node failovers and restarts on the cluster profile
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	servers := LocalServers()

	gwEnv := map[string]string{}
	if sc.GatewayEnv != nil {
		extra, closeFn, err := sc.GatewayEnv(seed)
		if err != nil {
			return res, err
		}
		defer closeFn()
		gwEnv = extra
	}
	var consumerEnv map[string]string
	if sc.ConsumerEnv != nil {
		extra, closeFn, err := sc.ConsumerEnv(seed)
		if err != nil {
			return res, err
		}
		defer closeFn()
		consumerEnv = extra
	}
	var buckets []int
	if sc.Buckets > 1 {
		buckets = make([]int, bucketedPrize+1)
		buckets[bucketedPrize] = sc.Buckets
	}
	stocks, draws := size.Stocks, []time.Duration(nil)
	if sc.Draw != nil {
		stocks = append(append([]int(nil), size.Stocks...), sc.Draw.Stock)
		draws = make([]time.Duration, len(stocks))
		draws[len(size.Stocks)] = sc.Draw.Window
	}
	c, err := NewPipeline(ctx, Options{Bin: bin, Stocks: stocks, Draws: draws, Buckets: buckets, Limit: max(sc.Limit, 1), Consumers: sc.Consumers, GatewayEnv: gwEnv, Log: log,
		PaymentTimeout: sc.PaymentTimeout, RegrabAfterCancel: sc.RegrabAfterCancel, ConsumerEnv: consumerEnv,
		Gateways: sc.Gateways, Reconcilers: sc.Reconcilers, NoProxy: sc.NoProxy, OpensLater: sc.OpensIn > 0})
	if err != nil {
		return res, fmt.Errorf("pipeline: %w", err)
	}
	defer c.Close()
	e := &Env{Pipeline: c, Servers: servers, Log: log, Seed: seed, stop: make(chan struct{}), Attempts: &AttemptLog{}}
	if sc.Draw != nil {
		if e.Draw, err = newDrawCrowd(c, *sc.Draw, len(size.Stocks), seed); err != nil {
			return res, err
		}
	}
	if sc.Before != nil {
		if err := sc.Before(ctx, e); err != nil {
			return res, fmt.Errorf("before: %w", err)
		}
	}

	tokens := make([]string, size.Users)
	for i := range tokens {
		if tokens[i], err = c.Token(userName(i)); err != nil {
			return res, err
		}
	}
	prizes := make([]int64, len(size.Stocks)) // the draw's prize, if any, is its own crowd's
	for i := range prizes {
		prizes[i] = c.Prizes[i].ID
	}
	crowd := &Crowd{Targets: c.CrowdTargets(), Concurrency: size.Concurrency, RetryBudget: 25 * time.Second,
		Tokens: func(u int) string { return tokens[u] }, Prizes: prizes, Session: c.Session.ID, Rate: sc.Rate, Log: e.Attempts,
		History: c.History, RetryNotOpen: sc.OpensIn > 0}
	if sc.Concurrency > 0 {
		crowd.Concurrency = sc.Concurrency
	}
	clicks := Plan(seed, size.Requests, size.Users, len(prizes), sc.Repeats)
	if sc.Buckets > 1 {
		skewToBucketZero(clicks, sc.Buckets, size.Users, seed)
	}
	if sc.Rate == 0 && sc.Pace > 0 {
		crowd.Rate = float64(len(clicks)) / sc.Pace.Seconds()
	}

	var faultErr error
	var faultWG sync.WaitGroup
	var once sync.Once
	trigger := int(sc.At * float64(len(clicks)))
	onProgress := func(done int) {
		if sc.During == nil || done < trigger {
			return
		}
		once.Do(func() {
			faultWG.Add(1)
			go func() {
				defer faultWG.Done()
				call := c.History.Now()
				faultErr = sc.During(ctx, e)
				c.History.Add(history.Op{Client: -1, Kind: history.Fault, Call: call, Return: c.History.Now(), Out: sc.Name})
			}()
		})
	}
	if sc.OpensIn > 0 {
		// The crowd arrives a second before the open, as a flash crowd does.
		if err := c.OpenIn(ctx, sc.OpensIn); err != nil {
			return res, err
		}
		fmt.Fprintf(log, "  the session opens at %s; the crowd starts a second before\n", c.Session.Start.Format(time.RFC3339Nano))
		sleepCtx(ctx, time.Until(c.Session.Start.Add(-time.Second)))
	}
	phase := time.Now()
	if e.Draw != nil {
		go e.Draw.run(ctx)
	}
	answers := crowd.Fire(ctx, clicks, onProgress)
	close(e.stop)
	faultWG.Wait()
	fmt.Fprintf(log, "  crowd: %d clicks in %s\n", len(clicks), time.Since(phase).Round(time.Millisecond))
	if sc.OpensIn > 0 {
		// A row about a crowd above capacity that never met a refusal tested nothing of it.
		refused := e.Attempts.Count(http.StatusServiceUnavailable)
		fmt.Fprintf(log, "  answered 503 (over the admission limit, or the fault): %d attempts\n", refused)
		if refused == 0 {
			res.problem("the crowd was never refused: it did not exceed the gateways' admission limit")
		}
	}
	if faultErr != nil {
		res.problem("fault injection: %v", faultErr)
	}
	// Any consumer the fault left dead is restarted: the promise is about recovery.
	for i, p := range c.Consumers {
		if p.Exited() {
			if err := c.RestartConsumer(ctx, i); err != nil {
				return res, err
			}
		}
	}

	var drawn draw.Record
	if e.Draw != nil {
		// The draw's winners are admitted after its window: wait for them before draining.
		<-e.Draw.done
		if drawn, err = e.Draw.awaitDrawn(ctx, 60*time.Second); err != nil {
			res.problem("%v", err)
		}
	}
	phase = time.Now()
	if err := c.Drain(ctx, 60*time.Second); err != nil {
		res.problem("drain: %v", err)
	}
	fmt.Fprintf(log, "  drain: %s\n", time.Since(phase).Round(time.Millisecond))
	c.StopReconcilers()
	if out, err := c.ReconcileOnce(ctx); err != nil {
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) {
			return res, fmt.Errorf("reconciler --once: %w", err)
		}
		res.problem("reconciler --once exited %d: %s", exit.ExitCode(), tail(out, 3))
	}
	if err := c.Verify(ctx, answers, &res); err != nil {
		return res, fmt.Errorf("verify: %w", err)
	}
	if e.Draw != nil && drawn.Phase == draw.PhaseDrawn {
		if err := c.checkDraw(ctx, e.Draw, drawn, &res, log); err != nil {
			return res, fmt.Errorf("draw: %w", err)
		}
	}
	if err := c.checkHistory(ctx, sc, seed, artifacts, &res, log); err != nil {
		return res, fmt.Errorf("history: %w", err)
	}
	if res.Cancelled > 0 || res.Paid > 0 {
		cases, err := store.NewExceptions(c.DB).CountByKind(ctx)
		if err != nil {
			return res, err
		}
		fmt.Fprintf(log, "  orders: %d winners in all, %d still succeeded (%d paid), %d cancelled, %d units resold, %d refunds, exception cases %v\n",
			res.Orders+res.Cancelled, res.Orders, res.Paid, res.Cancelled, res.Resold, res.Refunds, cases)
		if err := c.logPrizes(ctx, log); err != nil {
			return res, err
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

// Table formats results as the chaos table.
func Table(w io.Writer, rows []Result) {
	// sold_out*: sold_out answers given while units remained, for a row with a prize with
	// stock buckets (verifySoldOut); "-" for a row without.
	fmt.Fprintf(w, "| %-58s | %10s | %8s | %7s | %5s | %6s | %8s | %9s | %6s | %8s | %10s | %4s | %5s | %9s | %12s | %8s |\n",
		"scenario", "seed", "requests", "retried", "202s", "orders", "rejected", "cancelled", "resold", "oversold", "duplicates", "lost", "drift", "sold_out*",
		"linearizable", "duration")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", 16))
	for _, r := range rows {
		early := "-"
		if r.Bucketed {
			early = fmt.Sprint(r.SoldOutEarly)
		}
		lin := r.Linearizable
		if lin == "" {
			lin = "not checked"
		}
		fmt.Fprintf(w, "| %-58s | %10d | %8d | %7d | %5d | %6d | %8d | %9d | %6d | %8d | %10d | %4d | %5d | %9s | %12s | %7.1fs |\n", r.Scenario, r.Seed,
			r.Requests, r.Retried, r.Accepted, r.Orders, r.Rejected, r.Cancelled, r.Resold, r.Oversold, r.Duplicates, r.Lost, r.Drift, early, lin,
			r.Duration.Seconds())
	}
	for _, r := range rows {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "FAIL %s (seed %d): %s\n", r.Scenario, r.Seed, p)
		}
	}
}

// awaitOrders waits until the consumers committed an order of the session (of prize i, or of
// any prize when i < 0) and returns how many there are then. A fault aimed at the consumers'
// batches starts here, not at a fraction of the crowd: a broker on its stock
// group.initial.rebalance.delay.ms holds the group's first assignment for 3 s, longer than the
// short suite's crowd takes to reach its trigger, so a kill timed by the crowd alone can land
// on consumers that never held a batch. Bounded: 30 s without an order is an error.
func awaitOrders(ctx context.Context, e *Env, i int) (int64, error) {
	c := e.Pipeline
	q, args := `SELECT COUNT(*) FROM orders WHERE session_id = ?`, []any{c.Session.ID}
	if i >= 0 {
		q, args = q+` AND prize_id = ?`, append(args, c.Prizes[i].ID)
	}
	for start := time.Now(); ; sleepCtx(ctx, 20*time.Millisecond) {
		var n int64
		if err := c.DB.WithContext(ctx).Raw(q, args...).Row().Scan(&n); err != nil {
			return 0, fmt.Errorf("count orders: %w", err)
		}
		if n > 0 {
			return n, nil
		}
		if time.Since(start) > 30*time.Second || ctx.Err() != nil {
			return 0, errors.New("no order committed within 30 s: the fault would hit consumers holding no batch")
		}
	}
}
