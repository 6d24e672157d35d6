package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/adminclient"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// What happens at the open of a sale, when a crowd far above capacity is already clicking?
// The other latency rows offer a fraction of the maximum to a session that is open; a sale
// opens under a crowd that arrived early and does not wait for answers. This step
// measures that with vegeta as the open-loop generator (vegeta.go), every request a
// different user, no Idempotency-Key (a first click), against the whole pipeline (gateway,
// one consumer and the reconciler on their shipped settings, as in salecurve.go).
//
// Per repetition: the pipeline's closed-loop maximum (1×); the crowd rate, the highest
// rate vegeta sustains against the trivial handler (bench -serve strategies) on this
// machine; then at 0.5×, 1×, the crowd rate and 2× (when below the crowd rate) the trivial
// handler, then the gateway on a fresh sale whose session opens openLead after the attack
// started, created and preheated through the admin API as an operator does; after the
// crowd-rate row, the sold-out answers of the sold-out prize, unkeyed and keyed, beside the
// trivial handler at the same rate. Every gateway figure is also a ratio to the trivial
// run at the same rate in the same repetition. Invariants (openfigures.go): every request
// answered, no 5xx but 503 and each 503 with Retry-After, the stock exact, every 202 an
// order after the drain and the orders exactly the admitted grabs; a violation fails the
// run after the remaining rows are measured.

const (
	openLead = time.Second // the attack starts this long before the session opens
	// openStockTime sizes the stock: the closed-loop max × this, so at 1× the prize sells
	// out about that long after the open.
	openStockTime = 1500 * time.Millisecond
	// openSellSlack × openStockTime is how long the attack allows for selling out (a
	// gateway at a third of its closed-loop goodput still sells out), then openTail more.
	openSellSlack = 3
	openTail      = 2 * time.Second
	soldOutWindow = 2 * time.Second  // each sold-out run
	crowdWindow   = 2 * time.Second  // each try of the crowd rate
	openSession   = 30 * time.Minute // the sale's session: open through every run on it
	// openDefaultConnections is -open-connections' default: a crowd's worth of connections.
	openDefaultConnections = 2000
)

// openDuration is how long each row's attack lasts.
const openDuration = openLead + openSellSlack*openStockTime + openTail

const (
	keyOpenClosedMax      = "open_closed_max"
	keyOpenCrowd          = "open_crowd"
	keyOpenSoldOutTrivial = "open_soldout_trivial"
	keyOpenSoldOutUnkeyed = "open_soldout_unkeyed"
	keyOpenSoldOutKeyed   = "open_soldout_keyed"
)

func keyOpenGateway(label string) string { return "open_gateway_" + label }
func keyOpenTrivial(label string) string { return "open_trivial_" + label }

// openRate is one load of the step.
type openRate struct {
	label   string // key suffix: half, max, crowd, double
	name    string // "0.5×", ...
	rate    int    // requests per second
	stock   int
	sellOut bool // the crowd must sell the prize out
}

// openRates are the step's loads: half the closed-loop max with a stock it cannot sell out
// (the old target's load: p99 at half the max), the max, the crowd rate, and twice the max
// when that is below the crowd rate. The other rows' stock sells out openStockTime after
// the open at 1×.
func openRates(closedMax float64, crowd int, d time.Duration) []openRate {
	sellable := int(math.Round(closedMax * openStockTime.Seconds()))
	half := max(1, int(math.Round(closedMax/2))) // vegeta reads a rate of 0 as "as fast as it can"
	rates := []openRate{
		{"half", "0.5×", half, int(float64(half)*d.Seconds()) + 1, false},
		{"max", "1×", int(math.Round(closedMax)), sellable, true},
		{"crowd", "crowd", crowd, sellable, true},
	}
	if double := int(math.Round(2 * closedMax)); double < crowd {
		rates = append(rates, openRate{"double", "2×", double, sellable, true})
	}
	return rates
}

// openEnv is one repetition's pipeline and what every attack on it shares.
type openEnv struct {
	c     *harness.Pipeline
	admin *adminclient.Client
	users feed
	procs []cpuProc // the pipeline's processes (gateway first), the generator not among them
	conns int
	sales []seckill.SessionPrize // created by the step: their Redis keys go at the end
	rep   int                    // the repetition, for the profiles' names
}

// trivialServer is the strategy server's /trivial, the comparison at every rate.
type trivialServer struct {
	url string
	pid int
}

func (b *bench) saleOpen(ctx context.Context, rep int) ([]measured, error) {
	env, done, err := b.openPipeline(ctx, b.openConns)
	if err != nil {
		return nil, err
	}
	defer done()
	env.rep = rep
	closed, err := b.openClosedMax(ctx, env)
	if err != nil {
		return nil, err
	}
	out := []measured{{keyOpenClosedMax, "open: whole pipeline, closed-loop max (1×; best of 64, 256, 768 clients)", closed}}
	srv, base, err := b.startStrategyServer(ctx, "")
	if err != nil {
		return out, err
	}
	defer srv.Kill()
	triv := trivialServer{base + "/trivial", srv.Pid()}
	crowd, tried, err := b.crowdRate(ctx, triv, env.conns)
	if err != nil {
		return out, err
	}
	out = append(out, measured{keyOpenCrowd, fmt.Sprintf("open: crowd rate, the highest vegeta sustains against the trivial handler (%d connections)", env.conns),
		&sample{ThroughputPS: float64(crowd), Extra: map[string]any{"tried": tried, "connections": env.conns}}})
	var k broken
	for _, r := range openRates(closed.ThroughputPS, crowd, openDuration) {
		ms, sale, err := b.openRow(ctx, env, triv, r, closed.ThroughputPS, &k)
		out = append(out, ms...)
		if err == nil && r.label == "crowd" {
			ms, err = b.soldOutRuns(ctx, env, triv, sale, r, &k)
			out = append(out, ms...)
		}
		if err == nil && (r.label == "max" || r.label == "crowd") {
			var trivRow *sample
			for _, m := range out {
				if m.key == keyOpenTrivial(r.label) {
					trivRow = m.s
				}
			}
			ms, err = b.drawRow(ctx, env, r, closed.ThroughputPS, trivRow, &k)
			out = append(out, ms...)
		}
		if err != nil {
			return out, errors.Join(k.err(), fmt.Errorf("open at %s (%d/s): %w", r.name, r.rate, err))
		}
	}
	return out, k.err()
}

// broken collects the invariants the step's runs broke: the step goes on measuring its
// other rows, and the run fails at the end with every one of them.
type broken struct{ errs []error }

func (k *broken) add(context string, err error) {
	if err != nil {
		k.errs = append(k.errs, fmt.Errorf("%s: %w", context, err))
	}
}

func (k *broken) err() error { return errors.Join(k.errs...) }

// openPipeline starts the step's pipeline: the gateway on its shipped settings but the
// per-user and per-IP rate limits (the crowd is one IP, and each user clicks once), one
// consumer and the reconciler on theirs, one warm-up grab persisted so the consumer holds
// its partition. done removes the step's sales from Redis and stops everything.
func (b *bench) openPipeline(ctx context.Context, conns int) (*openEnv, func(), error) {
	c, adminAddr, done, err := b.pipelineWith(ctx, curveStock, nil)
	if err != nil {
		return nil, nil, err
	}
	env := &openEnv{c: c, users: b.userFeed(), conns: conns,
		admin: &adminclient.Client{Base: "http://" + adminAddr, Token: c.Env["SECKILL_ADMIN_TOKEN"], HTTP: b.client}}
	cleanup := func() {
		env.dropSales(context.WithoutCancel(ctx))
		done()
	}
	if _, err := b.shippedServices(ctx, c); err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := b.warmUp(ctx, c, grabURL(c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)); err != nil {
		cleanup()
		return nil, nil, err
	}
	procs, err := b.pipelineProcs(c)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	for _, p := range procs {
		if p.name != "generator" { // the bench itself: vegeta generates here
			env.procs = append(env.procs, p)
		}
	}
	return env, cleanup, nil
}

func grabURL(gateway string, session, prize int64) string {
	return fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", gateway, session, prize)
}

// dropSales removes the Redis keys of the sales the step created (the harness removes its
// own prize's; the database and topics go with the pipeline).
func (e *openEnv) dropSales(ctx context.Context) {
	for _, s := range e.sales {
		k := stock.BucketKeysFor(s.Session, s.Prize, 0, 1)
		e.c.Redis.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(), k.Demand(), k.Wanted())
	}
}

// openClosedMax is 1×: the whole pipeline's closed-loop maximum on the pipeline's own
// session, each window's orders persisted before the next.
func (b *bench) openClosedMax(ctx context.Context, env *openEnv) (*sample, error) {
	c := env.c
	url := grabURL(c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	procs, err := b.pipelineProcs(c) // with the generator: the bench generates this loop
	if err != nil {
		return nil, err
	}
	id := seckill.SessionPrize{Session: c.Session.ID, Prize: c.Prizes[0].ID}
	persisted := func() (float64, error) {
		start := time.Now()
		admitted, orders, err := b.waitOrders(ctx, c, id, persistWait)
		if _, err := persistedCheck(admitted, orders, err); err != nil {
			return 0, err
		}
		return time.Since(start).Seconds(), nil
	}
	return b.pipelineMax(ctx, func(int) string { return url }, env.users, "oc", procs, persisted)
}

// crowdRate finds the crowd rate (crowdRates, crowdVerdict).
func (b *bench) crowdRate(ctx context.Context, triv trivialServer, conns int) (int, []string, error) {
	rate, tried, err := crowdSearch(crowdRates, crowdWindow, func(rate int) (openFigures, error) {
		spec := attackSpec{rate: rate, duration: crowdWindow, conns: conns, url: triv.url, pin: b.pinGenerator}
		tok, err := b.tokens(spec.targets()) // any users: the trivial handler reads no token
		if err != nil {
			return openFigures{}, err
		}
		spec.tokens = tok
		res, err := b.attack(ctx, spec)
		if err != nil {
			return openFigures{}, err
		}
		f := figuresOf(res.answers, rate, time.Time{})
		b.logf("  crowd rate? %d/s against the trivial handler: achieved %.0f/s, p99 %.1f ms; %s", rate, f.achievedPS, f.all.p99, mixLine(f.mix))
		return f, nil
	})
	b.logf("  crowd rate: %s", strings.Join(tried, "; "))
	return rate, tried, err
}

// openRow measures one load: the trivial handler, then the gateway on a fresh sale. It
// returns both rows and the gateway's sale, and adds the invariants the runs broke to k.
func (b *bench) openRow(ctx context.Context, env *openEnv, triv trivialServer, r openRate, closedMax float64, k *broken) (
	[]measured, seckill.SessionPrize, error) {
	var sale seckill.SessionPrize
	spec := attackSpec{rate: r.rate, duration: openDuration, conns: env.conns, pin: b.pinGenerator}
	tok, err := env.users(spec.targets()) // signed now, before anything is measured
	if err != nil {
		return nil, sale, err
	}
	spec.tokens = tok
	at := fmt.Sprintf("open at %s (%d/s)", r.name, r.rate)
	ts, err := b.trivialRun(ctx, triv, spec, at+", trivial handler", k)
	if err != nil {
		return nil, sale, err
	}
	ms := []measured{{keyOpenTrivial(r.label), fmt.Sprintf("open at %s: trivial handler, %d/s for %s, %d connections",
		r.name, r.rate, openDuration, env.conns), ts}}
	if err := pause(ctx, time.Second); err != nil {
		return ms, sale, err
	}
	gs, sale, err := b.gatewayRun(ctx, env, spec, r, at+", gateway", k)
	if gs != nil {
		setOpenRatios(gs, ts, closedMax)
		ms = append(ms, measured{keyOpenGateway(r.label), fmt.Sprintf("open at %s: gateway + whole pipeline, %d/s for %s (the session opens after %s), stock %d, %d connections",
			r.name, r.rate, openDuration, openLead, r.stock, env.conns), gs})
	}
	return ms, sale, err
}

// trivialRun attacks the trivial handler with spec (its url and CPU and RSS readings set
// here), returns the row and adds the invariants broken to k under at.
func (b *bench) trivialRun(ctx context.Context, triv trivialServer, spec attackSpec, at string, k *broken) (*sample, error) {
	spec.url, spec.rssPid, spec.keyPrefix = triv.url, triv.pid, ""
	spec.procs = []cpuProc{{"trivial", []int{triv.pid}}}
	res, err := b.attack(ctx, spec)
	if err != nil {
		return nil, err
	}
	after, err := cpuTimes(spec.procs)
	if err != nil {
		return nil, err
	}
	f := figuresOf(res.answers, spec.rate, time.Time{})
	s := sampleOf(f)
	cpu := processCPU(spec.procs, res.before, after)
	for k, v := range cpu {
		s.Extra[k] = v
	}
	s.Extra["cpu_s_generator"] = res.generator.Seconds()
	s.Extra["trivial_peak_rss_mb"] = res.peakRSSMB
	s.Extra["connections"] = spec.conns
	if f.answered > 0 {
		s.Extra["cpu_us_per_request_trivial"] = cpu["cpu_s_trivial"] * 1e6 / float64(f.answered)
	}
	b.logf("  trivial %d/s: achieved %.0f/s, p50 %.1f ms, p99 %.1f ms, max %.0f ms; %s; CPU %.2f s, generator %.2f s, peak RSS %.0f MB",
		spec.rate, f.achievedPS, f.all.p50, f.all.p99, f.all.max, mixLine(f.mix), cpu["cpu_s_trivial"], res.generator.Seconds(), res.peakRSSMB)
	k.add(at, trivialCheck(f, res.targets))
	return s, nil
}

// gatewayRun creates a sale of one hot prize of r.stock (per-user limit 1) whose session
// opens openLead after the attack starts, attacks the gateway with spec, waits until every
// admitted grab is an order, and returns the row and the sale; the invariants broken go to
// k under at.
func (b *bench) gatewayRun(ctx context.Context, env *openEnv, spec attackSpec, r openRate, at string, k *broken) (*sample, seckill.SessionPrize, error) {
	// Time to feed vegeta its targets before the attack (it reads them all first), and a
	// whole second: the admin API takes RFC 3339 times to the second.
	feedTime := 2*time.Second + time.Duration(float64(spec.targets())/50_000*float64(time.Second))
	open := time.Now().Add(openLead + feedTime).Truncate(time.Second).Add(time.Second)
	created, err := env.admin.CreateSale(ctx, fmt.Sprintf("open bench %s %d/s", r.name, r.rate), open, openSession,
		[]adminclient.Prize{{Name: "hot", Stock: r.stock}})
	if err != nil {
		return nil, seckill.SessionPrize{}, fmt.Errorf("create the sale: %w", err)
	}
	sale := seckill.SessionPrize{Session: created.Session, Prize: created.Prizes[0]}
	env.sales = append(env.sales, sale)
	spec.url, spec.startAt, spec.keyPrefix = grabURL(env.c.GatewayAddr, sale.Session, sale.Prize), open.Add(-openLead), ""
	spec.procs, spec.rssPid = env.procs, env.c.Gateway.Pid()
	profiled := b.profileOpen(ctx, env, open, r.label, env.rep)
	res, err := b.attack(ctx, spec)
	if perr := profiled(); err == nil && perr != nil {
		err = fmt.Errorf("profile the open: %w", perr)
	}
	if err != nil {
		return nil, sale, err
	}
	f := figuresOf(res.answers, spec.rate, open)
	s := sampleOf(f)
	s.Extra["gateway_peak_rss_mb"] = res.peakRSSMB
	s.Extra["cpu_s_generator"] = res.generator.Seconds()
	s.Extra["connections"], s.Extra["stock"] = spec.conns, r.stock
	b.logf("  gateway %d/s (open %.2fs after the attack started): achieved %.0f/s, goodput %.0f/s, p50 %.1f ms, p99 %.1f ms, max %.0f ms; %s",
		spec.rate, f.openAfterStartS, f.achievedPS, f.goodputPS, f.all.p50, f.all.p99, f.all.max, mixLine(f.mix))
	k.add(at, answerCheck(f, res.targets))
	return s, sale, b.settle(ctx, env, sale, r, f, res, s, at, k)
}

// settle waits for a gateway run's orders, reads every process's CPU over the run and its
// persistence, and checks the stock and the orders (invariants broken go to k under at).
// It fills s's stock, order and CPU extras.
func (b *bench) settle(ctx context.Context, env *openEnv, sale seckill.SessionPrize, r openRate, f openFigures,
	res attackResult, s *sample, at string, k *broken) error {
	start := time.Now()
	admitted, orders, rerr := b.waitOrders(ctx, env.c, sale, persistWait)
	s.Extra["persist_lag_s"] = time.Since(start).Seconds()
	after, err := cpuTimes(env.procs)
	if err != nil {
		return err
	}
	cpu := processCPU(env.procs, res.before, after)
	for k, v := range cpu {
		s.Extra[k] = v
	}
	if f.mix[kindAdmitted] > 0 {
		s.Extra["cpu_us_per_admitted_gateway"] = cpu["cpu_s_gateway"] * 1e6 / float64(f.mix[kindAdmitted])
	}
	if f.answered > 0 {
		s.Extra["cpu_us_per_answer_gateway"] = cpu["cpu_s_gateway"] * 1e6 / float64(f.answered)
	}
	k.add(at, stockCheck(admitted, int64(r.stock), r.sellOut, rerr))
	if rerr != nil {
		return nil // the counts are unknown: nothing below can be checked, and no count is written as 0
	}
	s.Extra["admitted"], s.Extra["orders"] = admitted, orders
	s.Oversold = max(0, admitted-int64(r.stock))
	ids, err := b.orderIDs(ctx, env.c, sale)
	k.add(at, ordersCheck(f, ids, orders, admitted, err))
	b.logf("  %d admitted of %d, %d orders, all persisted %.2fs after; CPU s: %s", admitted, r.stock, orders,
		s.Extra["persist_lag_s"], cpuAll(cpu))
	return nil
}

// orderIDs reads the request ids of the sale's orders.
func (b *bench) orderIDs(ctx context.Context, c *harness.Pipeline, sale seckill.SessionPrize) (map[string]bool, error) {
	var ids []string
	if err := c.DB.WithContext(ctx).Raw("SELECT request_id FROM orders WHERE session_id = ? AND prize_id = ? AND status = 'succeeded'",
		sale.Session, sale.Prize).Scan(&ids).Error; err != nil {
		return nil, fmt.Errorf("read the orders' request ids: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// soldOutRuns measure the answers of a sold-out prize at rate r for soldOutWindow each:
// the trivial handler, requests without a key (answered from the gateway's sold-out flag)
// and with fresh keys (which must ask Redis: a key may belong to a grab admitted before),
// every request a new user. They return the three rows and add the invariants broken to k.
func (b *bench) soldOutRuns(ctx context.Context, env *openEnv, triv trivialServer, sale seckill.SessionPrize, r openRate, k *broken) ([]measured, error) {
	spec := attackSpec{rate: r.rate, duration: soldOutWindow, conns: env.conns, pin: b.pinGenerator}
	unkeyed, err := env.users(spec.targets())
	if err != nil {
		return nil, err
	}
	keyed, err := env.users(spec.targets())
	if err != nil {
		return nil, err
	}
	spec.tokens = unkeyed
	at := fmt.Sprintf("sold-out answers at %d/s", r.rate)
	// The trivial handler answers only 202: its throughput is its 202s per second, the
	// figure the sold_out answers per second are compared with.
	ts, err := b.trivialRun(ctx, triv, spec, at+", trivial handler", k)
	if err != nil {
		return nil, err
	}
	out := []measured{{keyOpenSoldOutTrivial, fmt.Sprintf("sold-out answers: trivial handler at the crowd rate (%d/s for %s)", r.rate, soldOutWindow), ts}}
	for _, run := range []struct {
		key, name, prefix string
		tokens            func(int) string
	}{
		{keyOpenSoldOutUnkeyed, "sold-out answers: the sold-out prize, no Idempotency-Key", "", unkeyed},
		{keyOpenSoldOutKeyed, "sold-out answers: the sold-out prize, a fresh Idempotency-Key each", "open-soldout", keyed},
	} {
		spec.url, spec.tokens, spec.keyPrefix = grabURL(env.c.GatewayAddr, sale.Session, sale.Prize), run.tokens, run.prefix
		spec.procs, spec.rssPid = env.procs, env.c.Gateway.Pid()
		s, err := b.soldOutRun(ctx, env, spec, sale, r, fmt.Sprintf("%s, key %q", at, run.prefix), k)
		if err != nil {
			return out, err
		}
		setSoldOutRatios(s, ts)
		out = append(out, measured{run.key, fmt.Sprintf("%s (%d/s for %s, %d connections)", run.name, r.rate, soldOutWindow, env.conns), s})
	}
	return out, nil
}

// soldOutRun is one sold-out run on the gateway: its row (throughput: sold_out answers per
// second), the stock and the orders checked again after it (invariants broken go to k).
func (b *bench) soldOutRun(ctx context.Context, env *openEnv, spec attackSpec, sale seckill.SessionPrize, r openRate, at string, k *broken) (*sample, error) {
	res, err := b.attack(ctx, spec)
	if err != nil {
		return nil, err
	}
	f := figuresOf(res.answers, spec.rate, time.Time{})
	s := sampleOf(f)
	s.ThroughputPS = f.ratePS(kindSoldOut)
	s.Extra["gateway_peak_rss_mb"] = res.peakRSSMB
	s.Extra["cpu_s_generator"] = res.generator.Seconds()
	s.Extra["connections"] = spec.conns
	b.logf("  sold-out answers (key %q) %d/s: achieved %.0f/s, sold_out %.0f/s, p50 %.1f ms, p99 %.1f ms, max %.0f ms; %s",
		spec.keyPrefix, spec.rate, f.achievedPS, s.ThroughputPS, f.all.p50, f.all.p99, f.all.max, mixLine(f.mix))
	k.add(at, answerCheck(f, res.targets))
	return s, b.settle(ctx, env, sale, r, f, res, s, at, k)
}
